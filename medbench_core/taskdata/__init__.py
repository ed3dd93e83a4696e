"""Task data: the task model (queries, corpus, graded qrels, metadata), the catalogue, readers of source
layouts, data contracts, licences, images and archives."""

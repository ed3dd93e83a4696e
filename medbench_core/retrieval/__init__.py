"""Retrieval: the model registry and its kinds, corpus representations and indices (BM25, dense, CLIP,
FAISS), ranking, chunking, runs built from upstream runs, and query expansions."""

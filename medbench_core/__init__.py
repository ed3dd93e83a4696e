"""medbench_core: the library behind medbench.

Data model, readers, retrievers, indices, metrics and statistics. It imports no dagster,
mlflow or dvc and reads no environment variables; heavy libraries (torch, faiss,
sentence-transformers, open_clip) are imported inside the functions that need them.
"""

from medbench_core.errors import DataError, IntegrityError, MedbenchError

__all__ = ["DataError", "IntegrityError", "MedbenchError"]

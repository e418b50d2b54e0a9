"""Everything but the extras lives in pyproject.toml ([project]); the extras
are here, their one place (pyproject.toml declares them dynamic)."""
from setuptools import setup

setup(
    extras_require={
        # 'test' builds the documentation too (tests/test_docs.py), so CI checks it,
        # and installs pymetis, so CI runs the METIS partitions' tests.
        'test': ['pytest', 'ruff', 'scikit-learn', 'sphinx>=7', 'myst-parser>=2', 'pymetis'],
        'benchmark': ['psutil'],
        # partition(method='metis') without pyg-lib or torch-sparse (a wheel on PyPI).
        'metis': ['pymetis'],
        # method='faiss' of the semantic kNN search (knn.faiss_knn_cosine; never chosen by 'auto').
        'faiss': ['faiss-cpu'],
        # The site (python -m sphinx -W -b html docs docs/_build) and the figure scripts.
        'docs': ['sphinx>=7', 'myst-parser>=2', 'matplotlib'],
    },
)

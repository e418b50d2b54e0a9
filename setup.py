import re

from setuptools import find_packages, setup

with open('torch_geometric_regcn/version.py', encoding='utf-8') as f:
    version = re.search(r"__version__ = '(.+)'", f.read()).group(1)

setup(
    name='torch_geometric_regcn',
    version=version,
    description='tsGCN and the regularizer-centred GCN framework (AAAI 2023) for PyTorch Geometric',
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    license='MIT',
    python_requires='>=3.9',
    packages=find_packages(include=['torch_geometric_regcn', 'torch_geometric_regcn.*']),
    install_requires=[
        'torch>=2.1',
        'torch_geometric>=2.5',
        'numpy',
        'pandas',
        'scipy',  # PyG's Planetoid and AttributedGraphDataset readers
        'tqdm',
    ],
    extras_require={
        'test': ['pytest', 'ruff', 'scikit-learn'],
        'benchmark': ['psutil'],
        'docs': ['matplotlib'],
    },
)

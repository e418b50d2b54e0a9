r"""The experiment harness of the repository's examples, benchmarks and figure
scripts: where the paper's datasets lie offline, the training protocol, the
methods of Table 3 and the paper's own figures. It is not part of the
installed package; run the scripts from the repository root as modules
(``python -m benchmarks.accuracy``), so that it is importable."""

"""Models on a heterophilous graph of Platonov et al., on its official splits.

    python -m examples.heterophily --dataset NAME [--root DIR] [--splits K] [--epochs E]
                                   [--models M ...] [--points P] [--json PATH]
                                   [--device DEVICE] [--journal PATH]
    python -m examples.heterophily --merge PATH [PATH ...] [--json PATH]

Trains each model (by default the two models of the package's recommendation
and GCN; --models all for every one below) on the first K of the dataset's ten
official splits with the protocol of issue 29 (harness/heterophily.py: 64
hidden units, dropout 0.5, Adam 0.01, weight decay 5e-4, 300 epochs) in each
configuration of its grid
(at most three per model, written in its entry of harness.heterophily.MODELS:
for the layer stacks, 2 plain layers or residual connections with LayerNorm
at 2 or 4 layers; for the others their depth or teleport probability; --points
P keeps the first P of every grid, 1 being the issue's fixed protocol), and
reports for the configuration of best mean validation score over those
splits the test score at each split's epoch of best validation score,
measured by the dataset's metric (accuracy, or ROC-AUC of class 1 for the
two-class sets); then a table of the mean and standard error over the
splits, in percent, and each model's paired difference to GCN. Nothing is
chosen on the test nodes. Each split's model is seeded by the split index
(the same seeds for every configuration).

The package's recommended heterophily model ("Recommended (by validation)",
"recommended" in the JSON) is one search over the grids of `regcn` and
`regcn_polynormer` together: of their six points (2P with --points P), the one
of best mean validation score. It is reported whenever both ran (also by --merge).

Models: RegCN, `regcn` (RegularizerConv
layers with the learned polynomial frequency response of degree 2; its grid is
the 2-layer protocol with ego/neighbour separation (root_weight=True), the
same without it, and residual connections with LayerNorm at 4 layers of
degree 1 (one hop per layer), so that
--points 2 chooses the separation on validation), `regcn_polynormer` (PyG's
Polynormer with each local GCNConv replaced by RegularizerConv with RegCN's
learned response, on Polynormer's grid of 2, 4 and 7 local layers), and the
variants `regcn_dir`
(one regulariser per edge direction), `regcn_sem` (tsGCN's regulariser,
alpha = beta = 1, its semantic kNN graph beside the topology, with
separation), `regcn_signed` (the signed Laplacian,
alpha learned from -0.25) and `regcn_sep` (the GCN regulariser with
ego/neighbour separation); the baselines MLP, GCN, GraphSAGE, GAT, APPNP,
GCNII, FAGCN (FAConv), Dir-GCN and Dir-SAGE (DirGNNConv: edge direction as
stored, meaningful on the _directed sets), LINKX and Polynormer (PyG's),
GPR-GNN (harness/gprgnn.py, from its paper); and the package's tsGCN by exact
CG propagation for reference, with its semantic kNN graph (tsgcn) and without
it (tsgcn_topology).

--dataset cora, citeseer or pubmed checks the models on the homophilous
graphs instead: the paper's random splits of seeds 0..9 (20 labelled nodes
per class, 500 validation, 1,000 test nodes) stand for the official splits,
and the metric is accuracy (--root does not apply: the offline copy of
../shared/data is read).

With --json, writes {"dataset", "metric", "chosen", "results", ...}: "chosen"
maps each model to its chosen configuration, its grid and each point's mean
validation score, "results" each model to its test score per split, in split
order, as a fraction in [0, 1]; harness/heterophily_results.py describes the
other keys (validation scores, epochs and seconds per split, every run of the
search). --models runs a subset, so that a comparison can run as parallel
processes (per dataset, or per dataset and group of models), each with its
own --json; --merge reads such files, prints each dataset's table (and a
summary over datasets) and with --json writes the merged record: one dataset's
object, or an object of them by dataset when the files hold several.

With --journal, every run is appended to PATH as it finishes (one JSON line,
harness.heterophily_results.Journal) and a run already there (same dataset,
model, split, full configuration and device type) is read back instead of trained: an
interrupted comparison resumes where it stopped, and a run with a larger
--points reuses the runs of a smaller one.

Without --root, the raw file is copied from ../shared/data/heterophilous into
a temporary root (no download); with --root, PyG's HeterophilousGraphDataset
downloads its five sets as usual.
"""
import argparse
import json
import os
import time

import torch

from harness.cli import check_writable, device_name, positive_int
from harness.heterophily import (
    HOMOPHILOUS,
    MODELS,
    PROTOCOL,
    RECOMMENDED,
    SEMANTIC_K,
    fit_model,
    load_heterophilous,
    load_homophilous,
    search,
)
from harness.heterophily_results import (
    RECOMMENDED_LABEL,
    RECOMMENDED_NAME,
    Journal,
    describe,
    format_summary,
    format_table,
    load,
    record,
)
from torch_geometric_regcn import SemanticGraph
from torch_geometric_regcn.datasets import HETEROPHILOUS
from torch_geometric_regcn.datasets.heterophilous import normalize_name
from torch_geometric_regcn.utils.progress import progress_bar


def write_json(path, obj) -> None:
    # Written beside, then renamed: a process stopped while writing leaves no half file.
    with open(f'{path}.tmp', 'w', encoding='utf-8') as f:
        json.dump(obj, f, indent=2)
        f.write('\n')
    os.replace(f'{path}.tmp', path)


#: What a run without --models trains: the models of the package's recommended
#: heterophily model and GCN, the comparison of issue 29.
DEFAULT_MODELS = (*RECOMMENDED, 'gcn')


def merge_files(paths, out=None) -> None:
    records = load(paths)
    if out:  # first: a table that fails must not lose the merge
        write_json(out, next(iter(records.values())) if len(records) == 1 else records)
    for rec in records.values():
        print(format_table(rec) + '\n')
    if len(records) > 1:
        print(format_summary(records))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dataset', type=normalize_name,
                        choices=list(HETEROPHILOUS) + list(HOMOPHILOUS),
                        help='a heterophilous dataset, or cora, citeseer, pubmed (the paper\'s '
                        'random splits of seeds 0..9, accuracy) to check the models there')
    parser.add_argument('--root', default=None, help='dataset root (default: a copy of '
                        '../shared/data/heterophilous)')
    parser.add_argument('--splits', type=positive_int, default=10,
                        help='the first K official splits (default: %(default)s)')
    parser.add_argument('--epochs', type=positive_int, default=PROTOCOL.epochs,
                        help='(default: %(default)s)')
    parser.add_argument('--models', nargs='+', default=list(DEFAULT_MODELS),
                        choices=[*MODELS, 'all'], metavar='MODEL',
                        help=f"of {', '.join(MODELS)}, or all (default: "
                        f"{' '.join(DEFAULT_MODELS)}: the recommended model's two and GCN)")
    parser.add_argument('--json', default=None, metavar='PATH',
                        help='write the record (or, with --merge, the merged one) to PATH')
    parser.add_argument('--merge', nargs='+', default=None, metavar='PATH',
                        help='merge the --json files of several runs and print the tables')
    parser.add_argument('--points', type=positive_int, default=None, metavar='P',
                        help="search only the first P points of each model's grid (1: the "
                        "issue's fixed protocol for the layer stacks; default: all)")
    parser.add_argument('--journal', default=None, metavar='PATH',
                        help='append every finished run to PATH and reuse the runs found '
                        'there (resume an interrupted run)')
    parser.add_argument('--device', type=device_name,
                        default='cuda' if torch.cuda.is_available() else 'cpu',
                        help='(default: %(default)s)')
    args = parser.parse_args()
    # What --merge would ignore: the flags of a training run, given values of their own.
    trained = [f'--{name}' for name in ('dataset', 'root', 'splits', 'epochs', 'models',
                                        'points', 'journal')
               if getattr(args, name) != parser.get_default(name)]
    if 'all' in args.models:
        args.models = list(MODELS)
    if args.json is not None:  # fail now, not after hours of training
        check_writable(parser, '--json', args.json)
    if args.journal is not None:
        check_writable(parser, '--journal', args.journal)
        if args.json is not None and os.path.abspath(args.json) == os.path.abspath(args.journal):
            parser.error('--json and --journal name the same file: the record would '
                         'overwrite the journal of finished runs; give them two paths')
    if args.merge:
        if trained:
            parser.error(f"--merge reads the runs and datasets from its files and trains "
                         f"nothing: drop {', '.join(trained)}")
        missing = [path for path in args.merge if not os.path.isfile(path)]
        if missing:
            parser.error(f"--merge: no such file {missing[0]!r}")
        try:
            merge_files(args.merge, args.json)
        except ValueError as error:  # a file that is no record, or records that disagree
            parser.error(f'--merge: {error}')
        return
    if args.dataset is None:
        parser.error('--dataset is required (or --merge)')

    if args.dataset in HOMOPHILOUS and args.root is not None:
        parser.error('--root applies to the heterophilous sets: cora, citeseer and pubmed '
                     'are read from the offline copy in ../shared/data')
    try:
        if args.dataset in HOMOPHILOUS:
            metric, data = 'accuracy', load_homophilous(args.dataset)
        else:
            metric = HETEROPHILOUS[args.dataset].metric
            data = load_heterophilous(args.dataset, args.root)
    except OSError as error:  # not staged, or --root without the raw file and no network
        where = ('in ../shared/data' if args.dataset in HOMOPHILOUS else
                 f'under --root {args.root} ({args.dataset}/raw/, as PyG lays it out)'
                 if args.root is not None else
                 f'in ../shared/data/heterophilous, or under a --root DIR ({args.dataset}/raw/)')
        parser.error(f'{args.dataset} could not be loaded ({error}); its raw files must be '
                     f'{where}')
    protocol = PROTOCOL._replace(epochs=args.epochs)
    num_splits = data.train_mask.size(1)
    if not 1 <= args.splits <= num_splits:
        parser.error(f'--splits must be in [1, {num_splits}] (got {args.splits})')
    num_classes = int(data.y.max()) + 1
    data = data.to(args.device)
    print(f'{args.dataset}: {data.num_nodes} nodes, {data.edge_index.size(1)} edges, '
          f'{data.num_features} features, {num_classes} classes; metric {metric}; '
          f'{args.splits} of {num_splits} official splits, {args.epochs} epochs; '
          f'device {args.device}')
    if any(MODELS[name].semantic for name in args.models):
        start = time.perf_counter()
        data = SemanticGraph(SEMANTIC_K, progress=False)(data)
        print(f'semantic graph (k={SEMANTIC_K}): {data.semantic_edge_index.size(1)} edges, '
              f'{time.perf_counter() - start:.1f}s')

    journal = None if args.journal is None else Journal(args.journal)
    if journal is not None:
        print(f'journal {args.journal}: {len(journal)} runs recorded')
    searches, from_journal = [], [False]  # whether the last run was read back
    for name in args.models:
        grid = MODELS[name].grid[:args.points]  # a smaller budget, the same for every model

        def fit(name, split, metric, config, seed):
            found = None if journal is None else journal.get(args.dataset, name, config, seed,
                                                             args.device)
            from_journal[0] = found is not None
            if found is not None:
                return found
            with progress_bar(args.epochs, f'{name} split {seed}', 'epoch', leave=False) as bar:
                result = fit_model(name, split, metric, config, seed,
                                   on_epoch=lambda _: bar.update())
            if journal is not None:
                journal.add(args.dataset, name, config, seed, args.device, result)
            return result

        def report(point, k, result, name=name, grid=grid):
            print(f'{MODELS[name].label} [{point + 1}/{len(grid)}: {describe(grid[point])}] '
                  f'split {k}: test {metric} {100 * result.test:.1f} (val '
                  f'{100 * result.val:.1f}, best epoch {result.best_epoch}, '
                  f"{result.seconds:.1f}s{', from the journal' if from_journal[0] else ''})")

        found = search(name, data, metric, range(args.splits), protocol, fit, report,
                       points=args.points)
        print(f'{MODELS[name].label}: chosen [{found.index + 1}/{len(grid)}: '
              f'{describe(grid[found.index])}] by mean validation {metric} '
              f"({', '.join(f'{100 * v:.1f}' for v in found.mean_val)})")
        searches.append(found)

    rec = record(args.dataset, metric, searches, {name: MODELS[name].label for name in MODELS})
    if RECOMMENDED_NAME in rec['chosen']:
        chosen = rec['chosen'][RECOMMENDED_NAME]
        print(f"{RECOMMENDED_LABEL}: chosen [{chosen['index'] + 1}/{len(chosen['grid'])}: "
              f"{describe(chosen['grid'][chosen['index']])}] by mean validation {metric}")
    if args.json:  # first: a table that fails must not lose the runs
        write_json(args.json, rec)
    print('\n' + format_table(rec))


if __name__ == '__main__':
    main()

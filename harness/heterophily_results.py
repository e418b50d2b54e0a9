r"""The record of a heterophily comparison (issue 29): the JSON object that
:mod:`examples.heterophily` writes per dataset, the merge of several such
files (one per process of a parallel run), and the tables printed from them.

The object of one dataset (the first four keys are the issue's)::

    {"dataset": str, "metric": "accuracy" | "roc_auc",
     "chosen": {model: {"config": {...}, "grid": [point, ...], "index": i,
                        "mean_val": [mean validation score per point]}},
     "results": {model: [test score per split]},      # the chosen point's
     "splits": [k, ...],                               # the official splits run
     "labels": {model: name in tables},
     "val": {model: [...]}, "best_epoch": {model: [...]},
     "seconds": {model: [...]},                        # per split, chosen point
     "runs": {model: [{"val", "test", "best_epoch", "seconds": [per split]}
                      per grid point]}}

Scores are fractions in :math:`[0, 1]`; every list per split is in the order
of :obj:`"splits"`. A record that holds both models of
:obj:`harness.heterophily.RECOMMENDED` also holds, first, the package's
recommended model under :obj:`"recommended"` (:func:`with_recommended`),
derived from them."""
import json
import math
import statistics
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from harness.heterophily import RECOMMENDED, Config, Search, SplitResult, select
from harness.measure import processor_name
from harness.results import ResultStore

Record = Dict[str, Any]

#: The keys every model of a record has an entry under.
PER_MODEL = ('chosen', 'results', 'labels', 'val', 'best_epoch', 'seconds', 'runs')

#: The entry of the package's recommended model (:obj:`RECOMMENDED`'s search).
RECOMMENDED_NAME = 'recommended'
RECOMMENDED_LABEL = 'Recommended (by validation)'


def mean_and_error(values: Sequence[float]) -> Tuple[float, float]:
    r"""The mean and its standard error (sample standard deviation over the
    square root of the count; :obj:`nan` for one value); both :obj:`nan`
    where a value is (a diverged run), which :mod:`statistics` cannot sum."""
    if not all(math.isfinite(v) for v in values):
        return math.nan, math.nan
    if len(values) < 2:
        return statistics.mean(values), math.nan
    return statistics.mean(values), statistics.stdev(values) / math.sqrt(len(values))


def describe(point: Config) -> str:
    r"""A grid point in a table cell: :obj:`key=value` pairs."""
    return ', '.join(f'{key}={value}' for key, value in point.items()) or 'as configured'


def record(dataset: str, metric: str, searches: Sequence[Search],
           labels: Dict[str, str]) -> Record:
    r"""The JSON object of :obj:`searches` (one per model, the same splits)
    on :obj:`dataset`, :obj:`labels` naming each model in tables."""
    splits = {tuple(s.splits) for s in searches}
    if len(splits) > 1:
        raise ValueError(f'The searches ran different splits: {sorted(splits)}')
    out: Record = {'dataset': dataset, 'metric': metric, 'chosen': {}, 'results': {},
                   'splits': list(next(iter(splits))) if splits else [],
                   **{key: {} for key in PER_MODEL[2:]}}
    for s in searches:
        chosen = s.chosen_runs
        out['chosen'][s.name] = {'config': s.config, 'grid': list(s.grid), 'index': s.index,
                                 'mean_val': s.mean_val}
        out['results'][s.name] = [r.test for r in chosen]
        out['labels'][s.name] = labels[s.name]
        out['val'][s.name] = [r.val for r in chosen]
        out['best_epoch'][s.name] = [r.best_epoch for r in chosen]
        out['seconds'][s.name] = [r.seconds for r in chosen]
        out['runs'][s.name] = [{field: [getattr(r, field) for r in runs]
                                for field in ('val', 'test', 'best_epoch', 'seconds')}
                               for runs in s.runs]
    return with_recommended(out)


def with_recommended(rec: Record) -> Record:
    r""":obj:`rec` with the package's recommended model first, under
    :obj:`"recommended"`, where it holds every model of :obj:`RECOMMENDED`
    on the same splits: one search over their grids together (each point
    :obj:`{"model": name, **point}`, in :obj:`RECOMMENDED`'s order), the
    point of best mean validation score chosen (:func:`select`, the first on
    ties), its scores per split those of that point, :obj:`"runs"` every
    point's. The chosen point is always the chosen point of one member (the
    best of all points is the best of its model's), so the entry needs no
    run the record lacks. A record without every member is returned without
    the entry (a stale one is dropped). Changes nothing else; returns
    :obj:`rec`."""
    for key in PER_MODEL:
        rec[key].pop(RECOMMENDED_NAME, None)
    if not all(name in rec['results'] for name in RECOMMENDED):
        return rec
    grid, mean_val, owner = [], [], []
    for name in RECOMMENDED:
        chosen = rec['chosen'][name]
        grid += [{'model': name, **point} for point in chosen['grid']]
        mean_val += chosen['mean_val']
        owner += [(name, i) for i in range(len(chosen['grid']))]
    index = select(mean_val)
    name, point = owner[index]
    if point != rec['chosen'][name]['index']:  # cannot happen (see above): a guard
        raise ValueError(f"{rec['dataset']}: the recommended search chose point {point + 1} "
                         f"of {name}, which chose {rec['chosen'][name]['index'] + 1}")
    entry = {'chosen': {'config': {'model': name, **rec['chosen'][name]['config']},
                        'grid': grid, 'index': index, 'mean_val': mean_val},
             'labels': RECOMMENDED_LABEL,
             'runs': [run for member in RECOMMENDED for run in rec['runs'][member]],
             **{key: rec[key][name] for key in ('results', 'val', 'best_epoch', 'seconds')}}
    for key in PER_MODEL:
        rec[key] = {RECOMMENDED_NAME: entry[key], **rec[key]}
    return rec


def merge(records: Sequence[Record], sources: Sequence[str]) -> Dict[str, Record]:
    r"""The records of several processes merged per dataset, models in the
    order of :obj:`records`; :obj:`sources` names each record (its file) in
    errors.

    Raises :class:`ValueError`, naming the files, when a model appears twice
    for one dataset, when the records of one dataset ran different splits or
    metrics, or when two models were trained for different numbers of
    epochs (the comparison needs the same budget)."""
    if len(records) != len(sources):
        raise ValueError(f"'sources' must name each record ({len(records)} records, "
                         f"{len(sources)} sources)")
    merged: Dict[str, Record] = {}
    first: Dict[str, str] = {}  # dataset -> the file it first came from
    origin: Dict[Tuple[str, str], str] = {}  # (dataset, model) -> its file
    for rec, source in zip(records, sources):
        if not isinstance(rec, dict):
            raise ValueError(f'{source}: not a record of examples.heterophily (a JSON '
                             f'{type(rec).__name__}, not an object)')
        missing = [key for key in ('dataset', 'metric', 'splits', *PER_MODEL) if key not in rec]
        if missing:
            raise ValueError(f'{source}: not a record of examples.heterophily (no {missing})')
        dataset = rec['dataset']
        if dataset not in merged:
            merged[dataset] = {'dataset': dataset, 'metric': rec['metric'], 'chosen': {},
                               'results': {}, 'splits': rec['splits'],
                               **{key: {} for key in PER_MODEL[2:]}}
            first[dataset] = source
        out = merged[dataset]
        for key in ('metric', 'splits'):
            if rec[key] != out[key]:
                raise ValueError(f'{dataset}: {source} has {key} {rec[key]}, '
                                 f'{first[dataset]} has {out[key]}; merge records of the '
                                 f'same runs only')
        for model in rec['results']:
            if model == RECOMMENDED_NAME:  # derived again from its members below
                continue
            if (dataset, model) in origin:
                raise ValueError(f"{dataset}: model {model!r} is in both "
                                 f"{origin[dataset, model]} and {source}")
            origin[dataset, model] = source
            for key in PER_MODEL:
                out[key][model] = rec[key][model]
    for out in merged.values():
        with_recommended(out)
    epochs = {(dataset, model): rec['chosen'][model]['config'].get('epochs')
              for dataset, rec in merged.items() for model in rec['chosen']
              if model != RECOMMENDED_NAME}
    if len(set(epochs.values())) > 1:
        by_epochs: Dict[Any, List[str]] = {}
        for (dataset, model), value in epochs.items():
            by_epochs.setdefault(value, []).append(f'{dataset}/{model} '
                                                   f'({origin[dataset, model]})')
        raise ValueError(f'The models were trained for different numbers of epochs: '
                         f'{by_epochs}')
    return merged


def load(paths: Sequence[str]) -> Dict[str, Record]:
    r""":func:`merge` of the JSON files :obj:`paths`: each a record, or the
    records by dataset that a merge of several datasets writes."""
    records, names = [], []
    for path in paths:
        with open(path, encoding='utf-8') as f:
            obj = json.load(f)
        several = isinstance(obj, dict) and 'dataset' not in obj and obj and all(
            isinstance(rec, dict) and rec.get('dataset') == name for name, rec in obj.items())
        for rec in (obj.values() if several else [obj]):
            records.append(rec)
            names.append(path)
    return merge(records, names)


def format_table(rec: Record) -> str:
    r"""The table of one dataset's record: per model the test score (%)
    mean ± standard error over the splits, the mean paired difference to
    GCN with its standard error (where GCN ran), the mean validation score,
    the chosen grid point and the mean seconds per run; a line says so where
    the models searched grids of different sizes (unequal budgets; the
    recommended model, whose search spans its two models' grids, aside), and
    one what the recommended model searched."""
    metric, splits = rec['metric'], rec['splits']
    lines = [f"{rec['dataset']}: test {metric} (%) at the best validation epoch, mean ± "
             f"standard error over the official splits {splits}; each model's "
             f"configuration chosen by its mean validation {metric} over those splits"]
    rows = [('model', 'test', '- GCN', 'val', 'chosen (grid point)', 's/run')]
    sizes = {len(rec['chosen'][model]['grid']) for model in rec['results']
             if model != RECOMMENDED_NAME}
    gcn = rec['results'].get('gcn')
    for model, scores in rec['results'].items():
        mean, error = mean_and_error(scores)
        diff = ''
        if gcn is not None and model != 'gcn':
            diff = '{:+.1f} ± {:.1f}'.format(
                *(100 * v for v in mean_and_error([a - b for a, b in zip(scores, gcn)])))
        chosen = rec['chosen'][model]
        grid = chosen['grid']
        point = (f"{chosen['index'] + 1}/{len(grid)}: {describe(grid[chosen['index']])}"
                 if len(grid) > 1 else 'fixed')
        rows.append((rec['labels'][model], f'{100 * mean:.1f} ± {100 * error:.1f}', diff,
                     f"{100 * statistics.mean(rec['val'][model]):.1f}", point,
                     f"{statistics.mean(rec['seconds'][model]):.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append('  '.join(cell.ljust(width) if i in (0, 4) else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(row, widths))).rstrip())
    if len(sizes) > 1:
        lines.append(f'Unequal budgets: the models searched grids of {min(sizes)} to '
                     f'{max(sizes)} points (the "chosen" column); compare models of the same '
                     f'grid size only')
    if RECOMMENDED_NAME in rec['results']:
        lines.append(f"{RECOMMENDED_LABEL}: one search over the grids of "
                     f"{' and '.join(RECOMMENDED)} together "
                     f"({len(rec['chosen'][RECOMMENDED_NAME]['grid'])} points), its scores "
                     f"those of the point it chose")
    return '\n'.join(lines)


def format_summary(records: Dict[str, Record]) -> str:
    r"""Test scores (%) of every model on every dataset of :obj:`records`,
    mean ± standard error, one row per model."""
    datasets = list(records)
    models: Dict[str, str] = {}
    for rec in records.values():
        for model, label in rec['labels'].items():
            models.setdefault(model, label)
    rows = [('model', *(f"{d} ({records[d]['metric']})" for d in datasets))]
    for model, label in models.items():
        cells = []
        for d in datasets:
            scores = records[d]['results'].get(model)
            cells.append('' if scores is None else '{:.1f} ± {:.1f}'.format(
                *(100 * v for v in mean_and_error(scores))))
        rows.append((label, *cells))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return '\n'.join('  '.join(cell.ljust(width) if i == 0 else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(row, widths))).rstrip()
                     for row in rows)


#: The CPU of this process, recorded with every journal row.
_PROCESSOR = processor_name()


class Journal:
    r"""The runs of :mod:`examples.heterophily` kept as they finish, so that an
    interrupted comparison resumes and a larger search reuses the runs of a
    smaller one: a :class:`~harness.results.ResultStore` (one JSON line per
    run, a cut last line dropped) of :obj:`{"dataset", "model", "config",
    "split", "device", "test", "val", "best_epoch", "seconds", "processor"}`.

    A run is reused only for the same dataset, model, split (its seed),
    full configuration (the protocol's fields included, so another number
    of epochs never matches) and device type (:obj:`"cpu"`, :obj:`"cuda"`:
    their roundings and times differ). Nor are the code and the processor
    part of the key: start a new journal after changing a model, and read
    the :obj:`"processor"` each run records (runs of the same configuration
    on an Intel and an AMD CPU differed by about two points on a split of
    chameleon_filtered for RegCN and FAGCN, by nothing for the other
    models). The file is created when
    the journal is opened, so a path that cannot be written fails before
    any training."""
    FIELDS = ('test', 'val', 'best_epoch', 'seconds')

    def __init__(self, path: str) -> None:
        with open(path, 'ab'):  # created (or checked writable) now
            pass
        self.path = path
        self._store = ResultStore(path, lambda run: self._key(
            run['dataset'], run['model'], run['config'], run['split'], run['device']))

    @staticmethod
    def _key(dataset: str, model: str, config: Config, split: int, device: str) -> str:
        # As JSON: a tuple of the configuration and the list it is read back as are equal.
        return json.dumps([dataset, model, config, int(split), torch.device(device).type],
                          sort_keys=True)

    def __len__(self) -> int:
        return len(self._store)

    def get(self, dataset: str, model: str, config: Config, split: int, device: str
            ) -> Optional[SplitResult]:
        r"""The recorded run, or :obj:`None`."""
        run = self._store.get(self._key(dataset, model, config, split, device))
        return None if run is None else SplitResult(*(run[field] for field in self.FIELDS))

    def add(self, dataset: str, model: str, config: Config, split: int, device: str,
            result: SplitResult) -> None:
        r"""Records :obj:`result` (appended to the file and flushed)."""
        self._store.add({'dataset': dataset, 'model': model, 'config': config,
                         'split': int(split), 'device': torch.device(device).type,
                         **result._asdict(), 'processor': _PROCESSOR})

r"""tsGCN's hyperparameters tuned on validation accuracy only, then tested.

Run from the repository root::

    python -m benchmarks.tune --datasets Cora CiteSeer [--seeds 3] [--final-seeds 10]
                              [--alphas A ...] [--betas B ...]
                              [--no-stage2 | --rank-factors F ... --ks K ...]
                              [--alpha-beta A B] [--rank-k R K]
                              [--stage3 [--dropouts P ...] [--weight-decays WD ...]
                               | --regularization P WD]
                              [--stage4 [--hiddens H ...] [--lrs LR ...]]
                              [--split public] [--output FILE]

Stage 1: for every (alpha, beta) of the grid, the paper's 2-layer tsGCN (rank
N // p with the paper's p, k = 10, dropout 0, weight decay 5e-4) trains
--grid-epochs epochs on --seeds random splits and is scored by its mean
validation accuracy (at each run's best validation epoch). Stage 2 (unless
--no-stage2), at the chosen (alpha, beta): the rank r in {r/2, r, 2r, 4r}, then
at the chosen rank the semantic graph's k in {5, 10, 20, 40}, scored the same
way. Stage 3 (with --stage3), at the chosen (alpha, beta, rank, k): dropout in
--dropouts (default {0, 0.5, 0.8}; the paper's model has none) times weight
decay in --weight-decays (default {5e-4 (the paper's), 5e-3, 5e-2}). The chosen
setting is then trained for 500 epochs on --final-seeds splits and its test ACC
and macro-F1 at the best validation epoch (and after the last epoch) are
reported beside the paper's. Stage 4 (with --stage4), at everything chosen
before: the two hyperparameters the paper fixes, hidden units in --hiddens
(default {16, 32 (the paper's), 64, 128}) times Adam's learning rate in --lrs
(default {5e-3, 1e-2 (the paper's), 5e-2}).

--split public does all of it on Planetoid's fixed public split (Cora,
CiteSeer, PubMed), its validation nodes choosing and its test nodes testing;
the seeds then vary the initialisation only.

Each grid can be set from the command line (--alphas, --betas, --rank-factors,
--ks, --dropouts, ...): where a stage's best lies on its grid's edge, widen the
grid past that edge and run the stage again.

--alpha-beta A B skips stage 1, --rank-k R K stage 2 and --regularization P WD
stage 3, starting from the choice of an earlier run (recorded in tuning.md);
the stages that do run use them, so e.g. --rank-k and --regularization without
--alpha-beta tune (alpha, beta) again at a later stage's choice. Test labels
play no part in any choice. Features are the row-normalised sparse CSR matrix,
so dropout draws only over stored entries. Appends to
benchmarks/results/tuning.md (--output: another file).
"""
import argparse
import datetime
import math
import os.path as osp
import statistics
import time

import torch

from harness.cli import (
    check_writable,
    int_at_least,
    non_negative_float,
    positive_float,
    positive_int,
)
from harness.data import load_paper_dataset, run_split
from harness.paper import DATASETS, paper
from harness.report import RESULTS
from harness.training import fit
from torch_geometric_regcn import TSGCN, LowRankInverse, SemanticGraph, paper_rank
from torch_geometric_regcn.datasets import PAPER_SETTINGS

OUT = osp.join(RESULTS, 'tuning.md')
ALPHAS = [0.5, 1.0, 2.0, 5.0]
BETAS = [0.1, 0.3, 0.5, 1.0]
RANK_FACTORS = [0.5, 1, 2, 4]  # stage 2: multiples of the paper's rank
KS = [5, 10, 20, 40]  # stage 2: the semantic graph's k
K = 10  # the semantic graph's k in stage 1
#: stage 3's default grid; the paper's model trains with dropout 0, weight decay 5e-4
DROPOUTS = [0.0, 0.5, 0.8]
WEIGHT_DECAYS = [5e-4, 5e-3, 5e-2]
PAPER_REGULARIZATION = (0.0, 5e-4)
#: stage 4's default grid; the paper's model has 32 hidden units and learns at 1e-2
HIDDENS = [16, 32, 64, 128]
LRS = [5e-3, 1e-2, 5e-2]
PAPER_OPTIMIZATION = (32, 1e-2)


def runs(base, alpha, beta, rank, seeds, epochs, k=K, dropout=0.0, weight_decay=5e-4,
         hidden=32, lr=1e-2, split='random'):
    data = base.clone()
    if k != K:  # base holds the stage-1 semantic graph
        del data.semantic_edge_index
        data = SemanticGraph(k, progress=False)(data)
    data = LowRankInverse(alpha, beta, rank, k=k, progress=False)(data)
    num_classes = int(data.y.max()) + 1
    results = []
    for seed in seeds:
        run = run_split(data, seed, split)
        torch.manual_seed(seed)
        model = TSGCN(run.num_features, hidden, num_classes, dropout=dropout)
        forward = lambda: model(run.x, run.lowrank_w, run.lowrank_v)  # noqa: B023, E731
        results.append(fit(model, forward, run, epochs, lr=lr, weight_decay=weight_decay))
    return results


def _flag(name: str, values, default) -> str:
    r"""The command-line flag that reproduces :obj:`values`, or nothing when
    they are the :obj:`default` (for the command recorded in tuning.md)."""
    if not values or values == default:
        return ''
    return f' {name} ' + ' '.join(f'{v:g}' for v in values)


def validation(base, alpha, beta, rank, k, args, dropout=0.0, weight_decay=5e-4, hidden=32,
               lr=1e-2) -> float:
    res = runs(base, alpha, beta, rank, range(args.seeds), args.grid_epochs, k, dropout,
               weight_decay, hidden, lr, args.split)
    return 100 * statistics.mean(r.val_accuracy for r in res)


def main() -> None:
    parser = argparse.ArgumentParser(prog='python -m benchmarks.tune',
                                    description=__doc__.splitlines()[0])
    parser.add_argument('--datasets', nargs='+', default=['Cora', 'CiteSeer'],
                        choices=[d for d in DATASETS if d != 'CoraFull'])
    parser.add_argument('--seeds', type=positive_int, default=3)
    parser.add_argument('--grid-epochs', type=positive_int, default=200)
    parser.add_argument('--final-seeds', type=int_at_least(2), default=10,
                        help='test runs; their standard deviation needs two (default: '
                             '%(default)s)')
    parser.add_argument('--alphas', nargs='+', type=non_negative_float, default=ALPHAS,
                        help="stage 1: the alphas to try (widen the grid where its best lies "
                             "on an edge)")
    parser.add_argument('--betas', nargs='+', type=non_negative_float, default=BETAS,
                        help='stage 1: the betas to try')
    parser.add_argument('--stage2', action=argparse.BooleanOptionalAction, default=True,
                        help='also tune the rank, then k')
    parser.add_argument('--rank-factors', nargs='+', type=positive_float, default=RANK_FACTORS,
                        help="stage 2: the ranks to try, as multiples of the paper's")
    parser.add_argument('--ks', nargs='+', type=positive_int, default=KS,
                        help="stage 2: the semantic graph's k to try (k = 10, at which the "
                             "rank is chosen, always takes part)")
    parser.add_argument('--alpha-beta', nargs=2, type=non_negative_float, metavar=('A', 'B'),
                        help='skip stage 1: (alpha, beta) chosen by an earlier stage 1')
    parser.add_argument('--rank-k', nargs=2, type=positive_int, metavar=('R', 'K'),
                        help='skip stage 2: (rank, k) chosen by an earlier stage 2')
    parser.add_argument('--stage3', action='store_true',
                        help='also tune dropout and weight decay')
    parser.add_argument('--dropouts', nargs='+', type=float, default=DROPOUTS,
                        help='stage 3: the dropout rates to try')
    parser.add_argument('--weight-decays', nargs='+', type=non_negative_float,
                        default=WEIGHT_DECAYS,
                        help='stage 3: the weight decays to try')
    parser.add_argument('--regularization', nargs=2, type=float, metavar=('P', 'WD'),
                        help='dropout and weight decay for every stage, e.g. as chosen by an '
                             'earlier stage 3 (default: the paper\'s 0 and 5e-4)')
    parser.add_argument('--stage4', action='store_true',
                        help='also tune the hidden units and the learning rate')
    parser.add_argument('--hiddens', nargs='+', type=positive_int, default=HIDDENS,
                        help='stage 4: the hidden sizes to try')
    parser.add_argument('--lrs', nargs='+', type=positive_float, default=LRS,
                        help='stage 4: the learning rates to try')
    parser.add_argument('--split', choices=['random', 'public'], default='random',
                        help="the paper's random splits, or Planetoid's fixed public split")
    parser.add_argument('--output', default=OUT,
                        help='the markdown file appended to (default: '
                             'benchmarks/results/tuning.md)')
    args = parser.parse_args()
    if args.stage3 and args.regularization:
        parser.error('--stage3 tunes dropout and weight decay; drop --regularization')
    dropouts = args.dropouts + ([args.regularization[0]] if args.regularization else [])
    if not all(0 <= p < 1 for p in dropouts):
        parser.error(f'dropout rates (--dropouts, --regularization P) must lie in [0, 1) '
                     f'(got {dropouts})')
    if args.regularization and not 0 <= args.regularization[1] < math.inf:
        parser.error(f'--regularization WD must be a finite non-negative weight decay '
                     f'(got {args.regularization[1]})')
    check_writable(parser, '--output', args.output)  # appended after each dataset's tuning
    for name in args.datasets:
        lines = []
        setting = PAPER_SETTINGS[name]
        start = time.perf_counter()
        base = load_paper_dataset(name, sparse_features=True)
        try:
            run_split(base, 0, args.split)  # a dataset without a public split fails here
        except ValueError as error:
            parser.error(f'{name}: {error}')
        runs_of = 'initialisations on the public split' if args.split == 'public' else 'splits'
        base = SemanticGraph(K, progress=False)(base)
        rank, k = args.rank_k or (paper_rank(base.num_nodes, setting.p), K)
        dropout, weight_decay = args.regularization or PAPER_REGULARIZATION
        grid_rank, grid_k, grid_reg = rank, k, (dropout, weight_decay)  # stage 1's setting
        grid, stage2 = {}, {}
        if args.alpha_beta:
            alpha, beta = args.alpha_beta
        else:
            for alpha in args.alphas:
                for beta in args.betas:
                    grid[alpha, beta] = validation(base, alpha, beta, rank, k, args, dropout,
                                                   weight_decay)
                    print(f'{name} alpha={alpha} beta={beta}: val {grid[alpha, beta]:.1f}',
                          flush=True)
            alpha, beta = max(grid, key=grid.get)
            stage2[rank, k] = grid[alpha, beta]
        if not args.rank_k and args.stage2:  # the rank at k = K, then k at the chosen rank
            for r in [int(f * rank) for f in args.rank_factors]:
                if 1 <= r < base.num_nodes and (r, k) not in stage2:
                    stage2[r, k] = validation(base, alpha, beta, r, k, args, dropout,
                                              weight_decay)
            rank = max((r for r, _ in stage2), key=lambda r: stage2[r, K])
            for kk in args.ks:
                if (rank, kk) not in stage2:
                    stage2[rank, kk] = validation(base, alpha, beta, rank, kk, args, dropout,
                                                  weight_decay)
            k = max((kk for r, kk in stage2 if r == rank), key=lambda kk: stage2[rank, kk])
            print(f'{name}: stage 2 ' + ', '.join(f'rank {r} k {kk}: {v:.1f}'
                                                  for (r, kk), v in stage2.items()), flush=True)
        stage3 = {}
        if args.stage3:
            grid3 = [(p, wd) for p in args.dropouts for wd in args.weight_decays]
            if (rank, k) in stage2 and (dropout, weight_decay) in grid3:
                stage3[dropout, weight_decay] = stage2[rank, k]
            for p, wd in grid3:
                if (p, wd) not in stage3:
                    stage3[p, wd] = validation(base, alpha, beta, rank, k, args, p, wd)
                print(f'{name} dropout={p} weight_decay={wd}: val {stage3[p, wd]:.1f}',
                      flush=True)
            dropout, weight_decay = max(stage3, key=stage3.get)
        hidden, lr = PAPER_OPTIMIZATION
        stage4 = {}
        if args.stage4:
            for h in args.hiddens:
                for rate in args.lrs:
                    stage4[h, rate] = validation(base, alpha, beta, rank, k, args, dropout,
                                                 weight_decay, h, rate)
                    print(f'{name} hidden={h} lr={rate}: val {stage4[h, rate]:.1f}',
                          flush=True)
            hidden, lr = max(stage4, key=stage4.get)
        final = runs(base, alpha, beta, rank, range(args.final_seeds), 500, k, dropout,
                     weight_decay, hidden, lr, args.split)
        last = [100 * r.last_accuracy for r in final]
        acc = [100 * r.accuracy for r in final]
        f1 = [100 * r.f1 for r in final]
        paper_acc, paper_f1 = paper('acc', 'tsGCN', name), paper('f1', 'tsGCN', name)
        mean_acc, mean_f1 = statistics.mean(acc), statistics.mean(f1)
        print(f'{name}: chose alpha={alpha} beta={beta} rank={rank} k={k} dropout={dropout} '
              f'weight_decay={weight_decay} hidden={hidden} lr={lr}; ACC {mean_acc:.2f} '
              f'F1 {mean_f1:.2f}; test ACC per run: ' + ' '.join(f'{a:.1f}' for a in acc),
              flush=True)
        skipped = f' --alpha-beta {alpha:g} {beta:g}' if args.alpha_beta else ''
        if not args.alpha_beta:
            skipped += _flag('--alphas', args.alphas, ALPHAS) + _flag('--betas', args.betas, BETAS)
        if not args.rank_k and args.stage2:
            skipped += (_flag('--rank-factors', args.rank_factors, RANK_FACTORS)
                        + _flag('--ks', args.ks, KS))
        skipped += f' --rank-k {rank} {k}' if args.rank_k else ''
        skipped += _flag('--regularization', args.regularization, None)
        if args.stage3:
            skipped += (' --stage3' + _flag('--dropouts', args.dropouts, DROPOUTS)
                        + _flag('--weight-decays', args.weight_decays, WEIGHT_DECAYS))
        if args.stage4:
            skipped += (' --stage4' + _flag('--hiddens', args.hiddens, HIDDENS)
                        + _flag('--lrs', args.lrs, LRS))
        if args.split == 'public':
            skipped += ' --split public'
        lines += [f'## {name}{" (public split)" if args.split == "public" else ""} '
                  f'({datetime.date.today()})', '',
                  f'Command: `python -m benchmarks.tune --datasets {name} --seeds {args.seeds} '
                  f'--grid-epochs {args.grid_epochs} --final-seeds {args.final_seeds}'
                  f'{"" if args.stage2 else " --no-stage2"}'
                  f'{skipped}`; paper rank '
                  f'{paper_rank(base.num_nodes, setting.p)} (p = {setting.p}), k = {K}; '
                  f'{time.perf_counter() - start:.0f} s.', '']
        if args.alpha_beta:
            lines += [f'Stage 1 skipped: alpha = {alpha}, beta = {beta} as chosen on '
                      'validation by the earlier stage 1 above (the paper: alpha = '
                      f'{setting.alpha}, beta = {setting.beta}).']
        else:
            lines += [f'Mean validation accuracy (%) over {args.seeds} {runs_of}, '
                      f'{args.grid_epochs} epochs, rank {grid_rank}, k = {grid_k}, dropout '
                      f'{grid_reg[0]:g}, weight decay {grid_reg[1]:g} (the paper: alpha = '
                      f'{setting.alpha}, beta = {setting.beta}):', '',
                      '| alpha \\ beta | ' + ' | '.join(map(str, args.betas)) + ' |',
                      '|---' * (len(args.betas) + 1) + '|']
            lines += [f'| {a} | ' + ' | '.join(f'{grid[a, b]:.1f}' for b in args.betas) + ' |'
                      for a in args.alphas]
        if args.rank_k:
            lines += ['', f'Stage 2 skipped: rank {rank}, k = {k} as chosen on validation by '
                      'an earlier stage 2.']
        elif args.stage2:
            lines += ['', f'Stage 2 at alpha = {alpha}, beta = {beta}, mean validation '
                      'accuracy (%): ' + ', '.join(f'rank {r} k {kk}: {v:.1f}'
                                                   for (r, kk), v in stage2.items()) + '.']
        if args.regularization:
            lines += ['', f'Stage 3 skipped: dropout {dropout:g}, weight decay '
                      f'{weight_decay:g} as chosen on validation by an earlier stage 3.']
        if args.stage3:
            lines += ['', f'Stage 3 at rank {rank}, k = {k}, mean validation accuracy (%): '
                      + ', '.join(f'dropout {p:g} weight decay {wd:g}: {v:.1f}'
                                  for (p, wd), v in stage3.items()) + '.']
        if args.stage4:
            lines += ['', f'Stage 4 at dropout {dropout:g}, weight decay {weight_decay:g}, '
                      'mean validation accuracy (%): '
                      + ', '.join(f'hidden {h} lr {rate:g}: {v:.1f}'
                                  for (h, rate), v in stage4.items()) + '.']
        lines += ['', f'Chosen on validation: alpha = {alpha}, beta = {beta}, rank {rank}, '
                  f'k = {k}, dropout {dropout:g}, weight decay {weight_decay:g}, hidden '
                  f'{hidden}, learning rate {lr:g}. Test over '
                  f'{args.final_seeds} {runs_of}, 500 epochs, at the best '
                  f'validation epoch: ACC {mean_acc:.1f} ({statistics.stdev(acc):.1f}) vs the '
                  f'paper\'s {paper_acc} (Δ {mean_acc - paper_acc:+.1f}); macro-F1 '
                  f'{mean_f1:.1f} ({statistics.stdev(f1):.1f}) vs {paper_f1} '
                  f'(Δ {mean_f1 - paper_f1:+.1f}); after the last epoch: ACC '
                  f'{statistics.mean(last):.1f} ({statistics.stdev(last):.1f}).', '']
        header = '' if osp.exists(args.output) else (
            "# tsGCN tuned on validation accuracy\n\nWritten by `python -m benchmarks.tune`; "
            'see its docstring for the protocol.\n\n')
        with open(args.output, 'a') as f:  # one dataset at a time: long runs keep what is done
            f.write(header + '\n'.join(lines) + '\n')
        print(f'appended {name} to {args.output}')


if __name__ == '__main__':
    main()

import shlex

from harness.report import Report, command_line, fmt


def test_report_prints_and_writes_markdown(tmp_path, capsys):
    rep = Report()
    rep('# Title')
    rep()
    rep.table(['solver', 'time (s)'], [['eigsh', 1.5], ['ours', '-']])
    rep('done')
    expected = ('# Title\n'
                '\n'
                '| solver | time (s) |\n'
                '|---|---|\n'
                '| eigsh | 1.5 |\n'
                '| ours | - |\n'
                '\n'
                'done\n')
    assert capsys.readouterr().out == expected  # each line printed as it is added
    assert rep.text() == expected
    path = tmp_path / 'new' / 'report.md'
    rep.write(str(path))
    assert path.read_text() == expected


def test_fmt():
    assert fmt(None) == '-'
    assert fmt(float('nan')) == 'n/a'
    assert fmt(0.000123456, '.2e') == '1.23e-04'
    assert fmt(3, 'd') == '3'


def test_command_line_quotes_what_the_shell_would_split():
    args = ['--datasets', 'Cora', 'CiteSeer', '--methods', 'tsGCN (LM)']
    line = command_line('benchmarks.accuracy', args)
    assert line.startswith('python -m benchmarks.accuracy --datasets Cora')
    assert shlex.split(line) == ['python', '-m', 'benchmarks.accuracy'] + args


def test_header_and_finish_frame_a_benchmark_report(tmp_path):
    import time
    rep = Report()
    rep.header('Title', 'benchmarks.x', ['--quick', '--rank', '8'], threads=1, quick=True)
    assert rep.lines[:3] == ['# Title (--quick smoke test)', '',
                             'Command (from the repository root): '
                             '`python -m benchmarks.x --quick --rank 8`']
    assert rep.lines[4].startswith('Machine: ')
    assert 'Every measurement ran in a fresh spawned process with 1' in rep.lines[4]
    # A benchmark that times both sides in its own process says so.
    inline = Report()
    inline.header('Title', 'benchmarks.x', [], threads=2, isolated=False)
    assert 'Every measurement ran in this one process with 2' in inline.lines[4]
    path = tmp_path / 'report.md'
    rep.finish(time.perf_counter(), str(path))
    assert rep.lines[-1].startswith('Total wall time 0.0 min; load average at the end: ')
    assert path.read_text() == rep.text()

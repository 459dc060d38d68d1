"""The command examples of README.md and of every docs/*.md page, run and compared with what
they print (a cram-style check).

Format (any page): in a fenced block, a line ``$ command`` is a shell command (continued on the
next lines while a line ends with ``\\``); the lines after it, up to the next ``$`` line or the
end of the block, are what it prints (stdout and stderr together). In expected output:

* a line ``...`` matches any number of lines (also none); ``...`` inside a line matches any text;
* numbers match within ``1e-6 + 1e-3 * |expected|``, on lines about error rates (``misclass``)
  within ``0.3 + 1e-3 * |expected|`` (a float32 training on another CPU's BLAS rounds
  differently: costs move in the 4th digit, an image or two may change class); text exactly
  (trailing spaces aside);
* :func:`mask` hides what differs from run to run: run directory time stamps
  (``runs/<name>-YYYYmmdd-HHMMSS``) and ``"...seconds": <number>`` timings; ``progress:`` lines
  (timing-dependent) are dropped from the actual output.

An HTML comment on the line before a block's fence changes how it is checked, with a reason the
reader sees: ``<!-- readme-test: skip: REASON -->`` (not run), ``<!-- readme-test: run-only:
REASON -->`` (run; it must exit 0; its output is an example, e.g. versions of this machine),
``<!-- readme-test: any-order -->`` (lines of several ranks in any order).

Pages are independent: each page's commands run in page order in a scratch folder of its own,
holding ``experiments/`` (a link to the repository's) and the MNIST sample in ``datasets/``, with
the virtualenv's ``distnet`` and ``mpiexec`` first on PATH, one BLAS thread, and on an x86 CPU with
AVX2 OpenBLAS's Haswell kernels (unless ``OPENBLAS_CORETYPE`` is set): the float32 digits were
recorded with them. A page uses only the files its own
earlier commands made (``runs/``, ``my_dist.yaml`` ...), never another page's, so any page can be
checked or updated alone and no command runs twice to serve two pages. ``$?`` is the previous
command's exit status. A run directory printed by a command replaces the page's name of it in
later commands of that page (``--resume runs/mnist_cnn-20261122-071923/checkpoint.h5``).

Updating a page after a change of output: ``bin/readme-update [PAGE] [LINE...]`` (PAGE defaults
to README.md, e.g. ``bin/readme-update docs/commands.md``; all its blocks, or those whose fence is
at the given 1-based lines) reruns the page's commands and rewrites each expected output that no
longer matches, keeping its ``...`` lines, the page's run directory names and the lines with
``...`` inside (other lines take this run's text and digits); ``--refresh`` rewrites the outputs
that still match too (this machine's digits). Review with ``git diff PAGE``.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TIMEOUT = 900

_FENCE = re.compile(r"^(\s*)```")
_DIRECTIVE = re.compile(r"<!--\s*readme-test:\s*([\w-]+)\s*:?\s*(.*?)\s*-->")
_RUN_DIR = re.compile(r"(runs/[\w.]+(?:-[A-Za-z_][\w.]*)*)-\d{8}-\d{6}(?:-\d+)?")
_SECONDS = re.compile(r'("\w*seconds": )-?[\d.]+(?:e[-+]?\d+)?')
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?|\.\d+")
_PROGRESS = re.compile(r"^(\[rank \d+\] )?progress: ")


@dataclass
class Command:
    text: str              # the command as bash runs it (continuation lines included)
    line: int              # 0-based page line of the "$ " line
    out_start: int         # page lines [out_start, out_end) hold the expected output
    out_end: int
    indent: str
    expected: list = field(default_factory=list)


@dataclass
class Block:
    line: int              # 0-based page line of the opening fence
    mode: str = "check"    # check / skip / run-only / any-order
    reason: str = ""
    commands: list = field(default_factory=list)
    page: str = "README.md"

    @property
    def name(self):
        return f"{self.page}:{self.line + 1}"


def pages():
    """The pages whose examples are checked, as paths relative to the repository: README.md,
    then every ``docs/*.md`` by name."""
    return ["README.md"] + sorted(f"docs/{p.name}" for p in DOCS.glob("*.md"))


def page_blocks(page):
    """The session blocks of one page (a path relative to the repository)."""
    return parse((ROOT / page).read_text(), page)


def parse(text, page="README.md"):
    """The session blocks of a page's text (blocks with at least one ``$`` line)."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start = m.group(1), i
        j = i + 1
        while j < len(lines) and not (lines[j].startswith(indent + "```") and lines[j].strip() == "```"):
            j += 1
        block = Block(start, page=page)
        d = _DIRECTIVE.search(lines[start - 1]) if start > 0 else None
        if d:
            block.mode, block.reason = d.group(1), d.group(2)
        body = [(k, lines[k][len(indent):] if lines[k].startswith(indent) else lines[k].lstrip())
                for k in range(start + 1, j)]
        cmd = None
        k = 0
        while k < len(body):
            n, line = body[k]
            if line.startswith("$ "):
                text = line[2:]
                while text.endswith("\\") and k + 1 < len(body):
                    k += 1
                    text += "\n" + body[k][1]
                cmd = Command(text, n, body[k][0] + 1, body[k][0] + 1, indent)
                block.commands.append(cmd)
            elif cmd is not None:
                cmd.expected.append(line)
                cmd.out_end = n + 1
            k += 1
        if block.commands:
            blocks.append(block)
        i = j + 1
    return blocks


# ---------------------------------------------------------------------------------------------
# Matching
# ---------------------------------------------------------------------------------------------

def mask(line):
    """``line`` without what differs from run to run (run directory stamps, timings)."""
    line = _RUN_DIR.sub(r"\1-<STAMP>", line.rstrip())
    return _SECONDS.sub(r"\1<T>", line)


def _numbers_close(a, b, atol=1e-6):
    return abs(float(a) - float(b)) <= atol + 1e-3 * abs(float(b))


def line_matches(expected, actual):
    """One expected line against one actual line (both unmasked)."""
    e, a = mask(expected), mask(actual)
    if e == a:
        return True
    if "..." in e:
        parts = [r"[-+.\de]+".join(re.escape(t) for t in _NUMBER.split(p)) for p in e.split("...")]
        pattern = ".*".join(parts)
        return re.fullmatch(pattern, a) is not None
    if _NUMBER.split(e) != _NUMBER.split(a):
        return False
    atol = 0.3 if "misclass" in e else 1e-6     # error rates: a few images either way
    return all(_numbers_close(y, x, atol) for x, y in zip(_NUMBER.findall(e), _NUMBER.findall(a)))


def optional(expected):
    """MPICH's own ``Abort(N) on node ...`` line after a distnet abort: mpiexec tears the job
    down as soon as a rank calls ``MPI_Abort`` and now and then drops that rank's last stderr
    line before forwarding it, so a page may show it without a run printing it."""
    return expected.startswith("Abort(") and "application called MPI_Abort" in expected


def align(expected, actual):
    """The cheapest alignment of expected lines (``...`` absorbs any number of actual lines)
    with actual lines: ``(cost, steps)``, steps ``("keep", e, a)``, ``("dots", e, [a...])``,
    ``("sub", e, a)``, ``("del", e, None)``, ``("ins", None, a)``. Cost 0: they match."""
    n, m = len(expected), len(actual)
    inf = float("inf")
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    cost[n][m] = 0
    for i in range(n, -1, -1):
        for j in range(m, -1, -1):
            if i == n and j == m:
                continue
            best = inf
            if i < n and expected[i].strip() == "...":
                best = cost[i + 1][j]
                if j < m:
                    best = min(best, cost[i][j + 1])
            else:
                if i < n and j < m:
                    best = min(best, (0 if line_matches(expected[i], actual[j]) else 1) + cost[i + 1][j + 1])
                if i < n:
                    best = min(best, (0 if optional(expected[i]) else 1) + cost[i + 1][j])
                if j < m:
                    best = min(best, 1 + cost[i][j + 1])
            cost[i][j] = best
    steps, i, j = [], 0, 0
    while i < n or j < m:
        if i < n and expected[i].strip() == "...":
            taken = []
            while j < m and cost[i][j + 1] == cost[i][j] and cost[i + 1][j] != cost[i][j]:
                taken.append(actual[j])
                j += 1
            steps.append(("dots", expected[i], taken))
            i += 1
            continue
        if i < n and j < m:
            ok = line_matches(expected[i], actual[j])
            if cost[i][j] == (0 if ok else 1) + cost[i + 1][j + 1]:
                steps.append(("keep" if ok else "sub", expected[i], actual[j]))
                i, j = i + 1, j + 1
                continue
        if i < n and cost[i][j] == (0 if optional(expected[i]) else 1) + cost[i + 1][j]:
            steps.append(("del", expected[i], None))
            i += 1
        else:
            steps.append(("ins", None, actual[j]))
            j += 1
    return cost[0][0], steps


def any_order(expected, actual):
    """For ``any-order`` blocks: the lines as multisets (wildcard lines excluded)."""
    rest = list(actual)
    for e in expected:
        if e.strip() == "...":
            continue
        hit = next((a for a in rest if line_matches(e, a)), None)
        if hit is None:
            return False
        rest.remove(hit)
    return not rest or any(e.strip() == "..." for e in expected)


def diff_text(steps):
    """A readable diff of an alignment: ``-`` expected, ``+`` printed, `` `` matching."""
    out = []
    for kind, e, a in steps:
        if kind == "keep":
            out.append("  " + e)
        elif kind == "dots":
            out.append("  ...  (" + f"{len(a)} lines)")
        elif kind == "sub":
            out += ["- " + e, "+ " + a]
        elif kind == "del":
            out.append("- " + e)
        else:
            out.append("+ " + a)
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------

def _has_avx2():
    """Whether this CPU runs OpenBLAS's Haswell kernels (x86 with AVX2; False where unknown)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx2" in line for line in f)
    except OSError:
        return False


class Session:
    """The scratch folder and the state carried from command to command."""

    def __init__(self, root=None):
        self.dir = Path(root or tempfile.mkdtemp(prefix="distnet-readme-"))
        (self.dir / "experiments").symlink_to(ROOT / "experiments")
        (self.dir / "benchmarks").symlink_to(ROOT / "benchmarks")
        self.status = 0
        self.run_dirs = {}       # the page's run directory name -> this session's
        bindir = os.path.dirname(sys.executable)
        env = dict(os.environ)
        env.pop("DISTNET_RUNS_DIR", None)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        env["OPENBLAS_NUM_THREADS"] = "1"   # the pages' digits are those of one BLAS thread
        env["OMP_NUM_THREADS"] = "1"
        env["COLUMNS"] = "100"
        if "OPENBLAS_CORETYPE" not in env and _has_avx2():
            # The pages' float32 digits were recorded with OpenBLAS's Haswell (AVX2) kernels. An
            # AVX-512 CPU picks kernels that add in another order, and twelve float32 epochs carry
            # that rounding into the 4th digit and an image or two of the error rates.
            env["OPENBLAS_CORETYPE"] = "Haswell"
        self.env = env

    def prepare_data(self):
        """The MNIST sample in ``datasets/`` (what ``distnet data mnist-sample datasets`` writes)."""
        from distnet.convert.sample import write_mnist_sample
        write_mnist_sample(str(self.dir / "datasets"))

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, command):
        """Run one command of a page; returns its printed lines (progress lines dropped)."""
        text = command.text
        for page_name, mine in self.run_dirs.items():
            text = text.replace(page_name, mine)
        proc = subprocess.run(["bash", "-c", f"(exit {self.status}); {text}"], cwd=self.dir, env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
        self.status = proc.returncode
        lines = proc.stdout.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return [line.rstrip() for line in lines if not _PROGRESS.match(line)]

    def learn_run_dirs(self, steps):
        """Pair the run directories of matched lines: the page's name -> the name printed here."""
        for kind, e, a in steps:
            if kind in ("keep", "sub") and e is not None and a is not None:
                for x, y in zip(_RUN_DIR.finditer(e), _RUN_DIR.finditer(a)):
                    if x.group(1) == y.group(1):
                        self.run_dirs.setdefault(x.group(0), y.group(0))

    def readme_names(self, line):
        """``line`` with this session's run directory names put back to the page's."""
        for page_name, mine in self.run_dirs.items():
            line = line.replace(mine, page_name)
        return line


def check_command(session, block, command):
    """Run ``command``; returns ``(ok, actual lines, alignment steps)``."""
    actual = session.run(command)
    expected, _ = _split_blank_tail(command.expected)
    if block.mode == "run-only":
        return session.status == 0, actual, [("keep", e, e) for e in expected]
    if block.mode == "any-order":
        ok = any_order(expected, actual)
        return ok, actual, [("keep", e, e) for e in expected] if ok else align(expected, actual)[1]
    cost, steps = align(expected, actual)
    session.learn_run_dirs(steps)
    return cost == 0, actual, steps


def updated_lines(session, steps):
    """New expected lines from an alignment: ``...`` lines and lines with ``...`` inside kept,
    every other line as printed now (matching lines too, so that their digits are this run's),
    with the page's run directory names; an :func:`optional` line a run did not print stays."""
    out = []
    for kind, e, a in steps:
        if kind == "dots" or (kind == "keep" and "..." in e) or (kind == "del" and optional(e)):
            out.append(e)
        elif kind in ("keep", "sub", "ins"):
            out.append(session.readme_names(a))
    return out


def _split_blank_tail(lines):
    """``(lines, trailing blank lines)``: blank lines that end an expected output separate it
    from the next command; they are not compared."""
    n = len(lines)
    while n and not lines[n - 1].strip():
        n -= 1
    return lines[:n], lines[n:]


def main(argv=None):
    """``bin/readme-update [PAGE] [LINE...]``: rerun the commands of one page (README.md unless
    PAGE is given, e.g. docs/commands.md) and rewrite the expected output of those that no longer
    match (only in the blocks whose fences are at the given 1-based lines, when some are given)."""
    import argparse
    ap = argparse.ArgumentParser(prog="bin/readme-update", description=main.__doc__)
    ap.add_argument("args", nargs="*", metavar="[PAGE] [LINE]",
                    help="a page (README.md or a page of docs/; default README.md), then lines of its "
                         "blocks' fences (default: all blocks)")
    ap.add_argument("--check", action="store_true", help="Only report; do not rewrite the page.")
    ap.add_argument("--refresh", action="store_true",
                    help="Also rewrite outputs that match within the tolerances (this run's digits).")
    args = ap.parse_args(argv)
    page, wanted_lines = "README.md", args.args
    if wanted_lines and not wanted_lines[0].isdigit():
        page, wanted_lines = wanted_lines[0], wanted_lines[1:]
    path = (Path.cwd() / page).resolve()
    try:
        page = str(path.relative_to(ROOT))
    except ValueError:
        ap.error(f"{page} is not a page of this repository ({ROOT})")
    if page not in pages():
        ap.error(f"{page} is not one of the checked pages: {', '.join(pages())}")
    try:
        wanted_lines = [int(x) for x in wanted_lines]
    except ValueError:
        ap.error(f"lines must be numbers: {' '.join(wanted_lines)}")
    text = path.read_text()
    lines = text.split("\n")
    session = Session()
    changes = []
    failed = 0
    try:
        session.prepare_data()
        for block in parse(text, page):
            if block.mode == "skip":
                print(f"{block.name}: skipped ({block.reason})")
                continue
            for command in block.commands:
                ok, actual, steps = check_command(session, block, command)
                first = command.text.splitlines()[0]
                print(f"{block.name}: $ {first[:70]}: {'ok' if ok else 'DIFFERS'}")
                if not ok:
                    failed += 1
                    print(diff_text(steps))
                wanted = not wanted_lines or block.line + 1 in wanted_lines
                if block.mode in ("check", "any-order") and wanted and (not ok or args.refresh):
                    tail = _split_blank_tail(command.expected)[1]
                    new = updated_lines(session, steps) + tail
                    if new != command.expected:
                        changes.append((command, new))
    finally:
        session.close()
    if changes and not args.check:
        for command, new in sorted(changes, key=lambda c: -c[0].out_start):
            lines[command.out_start:command.out_end] = [command.indent + x if x else x for x in new]
        path.write_text("\n".join(lines))
        print(f"{page}: rewrote the output of {len(changes)} command(s); review with git diff {page}")
    return 1 if failed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())

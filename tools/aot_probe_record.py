"""The loader probe's verdicts and its results record (tools/gpu_aot_loader_probe.sh, issue 34).

    python tools/aot_probe_record.py verdicts LOGS      one VERDICT line per hypothesis of a run
    python tools/aot_probe_record.py record --log LOG --env ENV [--backtrace BT] [--date D] --out DIR
    python tools/aot_probe_record.py render RECORD.json [--check MD]

`verdicts` reads what the probe leaves per hypothesis (LOGS/hypotheses.txt: `id|limit|name|file|modes|env`;
load_ID.rc: the exit status, "timeout after N s" or "not run: why"; load_ID.log: its STAGE lines and
faulthandler's stacks; load_ID.stuck: /proc state and children of a load killed at its limit) and
says what happened and where: the last STAGE a load printed names the step it died or stuck in.
`record` turns a run's printed lines (VERDICT, BUILT, LINKED, LINKTRACE, "=== ... done after N s"),
its environment.txt and gdb's backtrace into DIR/aot_loader_probe.json, and renders the .md the week-5
note includes (`<!-- results:aot_loader_probe.md -->`); `render --check` fails when a committed .md
is not its record's rendering. The first run (2026-12-07) printed its verdicts in an older shape
(no id for the in-process load, no seconds); both are read. Standard library only: the probe runs
it on the GPU machine, and the tests on the CPU.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

NAME = "aot_loader_probe"
TITLE = "Why AOTIModelPackageLoader dies on the lent GPU: one verdict per hypothesis"
OUTCOMES = ("ok", "SIGSEGV", "SIGABRT", "SIGKILL", "exit", "timeout", "not run", "not tried")
VERDICT = re.compile(r"^VERDICT (?:(?P<id>[A-Z]+\d*) )?(?:\[(?P<seconds>[\d.]+) s\] )?(?P<name>.*?): "
                     r"(?P<outcome>(?:" + "|".join(OUTCOMES) + r")\b.*)$")
SIGNALS = {"139": "SIGSEGV (signal 11)", "134": "SIGABRT (signal 6)", "137": "SIGKILL (signal 9)"}
# the step a load was in, from the last STAGE it printed (load.py prints a stage once it is reached)
IN_STEP = {
    None: "while importing torch",
    "imported": "before the load",
    "cuda_ready": "before the load",
    "inductor_imported": "in load_package's CPU-ISA checks",
    "device_info": "in load_package, before the constructor",
    "constructing": "in the loader's constructor",
    "calling": "in the library's std::regex call",
    "loaded": "while running",
    "ran": "after it ran",
}
STAGE = re.compile(r"^STAGE (\w+) ([\d.]+)$", re.M)
FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


# ------------------------------------------------------------------ one hypothesis's verdict
def where(log: str) -> str:
    """The step a load died or stuck in, and when: 'in the loader's constructor (3.1 s in)'."""
    stages = STAGE.findall(log)
    last, at = (stages[-1][0], stages[-1][1]) if stages else (None, None)
    step = IN_STEP.get(last, f"after STAGE {last}")
    return f"{step} ({float(at):.1f} s in)" if at is not None else step


def python_frame(log: str) -> str | None:
    """The innermost frame of the main script's thread in faulthandler's last dump: 'file.py:N func'."""
    blocks = re.split(r"^(?:Thread|Current thread) 0x[0-9a-f]+ .*\n", log, flags=re.M)[1:]
    for block in reversed(blocks):
        frames = [m for m in (FRAME.match(line) for line in block.splitlines()) if m]
        if any(Path(m["file"]).name in ("load.py", "build.py") for m in frames):
            top = frames[0]
            return f"{Path(top['file']).name}:{top['line']} {top['func']}"
    return None


def stuck_summary(stuck: str) -> str:
    """A killed load's /proc state and children, in a few words."""
    parts = []
    state = re.search(r"^state (\S+)", stuck, re.M)
    if state:
        parts.append(f"state {state.group(1)}")
    children = re.findall(r"^child \d+ (.*)$", stuck, re.M)
    if children:
        parts.append("child: " + " ".join(children[0].split())[:90])
    return "; ".join(parts)


def last_error(log: str) -> str:
    """The last line that reads as an error: not indented (a traceback's body), not a STAGE/MAPS line."""
    skip = (" ", "STAGE", "MAPS", "Thread", "Current thread", "Extension", "Fatal Python error")
    lines = [ln for ln in log.splitlines() if ln.strip() and not ln.startswith(skip)]
    picked = [ln for ln in lines if re.search(r"error|terminate|what\(\)|exception|Fatal", ln, re.I)] or lines
    return picked[-1].strip()[:200] if picked else ""


def outcome(status: str, log: str, stuck: str = "") -> str:
    """What happened to one load: ok (its RAN line), a signal and where, a timeout and where, exit N."""
    status = status.strip()
    if status == "0":
        ran = re.findall(r"^RAN (.*)$", log, re.M)
        stages = ", ".join(f"{name} {float(t):.1f}" for name, t in STAGE.findall(log))
        details = "; ".join(d for d in (ran[-1][:160] if ran else "", stages and f"s at each stage: {stages}") if d)
        return f"ok ({details})" if details else "ok"
    if status in SIGNALS:
        text = f"{SIGNALS[status]} {where(log)}"
        error = last_error(log) if status == "134" else ""
        return f"{text}: {error}" if error else text
    if status.startswith("timeout"):
        details = [d for d in (python_frame(log) and f"python at {python_frame(log)}", stuck_summary(stuck)) if d]
        return f"{status} {where(log)}" + (f" ({'; '.join(details)})" if details else "")
    if status.startswith("not run"):
        return status
    if status.lstrip("-").isdigit():
        return f"exit {status}: {last_error(log)}"
    raise ValueError(f"load status {status!r}: expected an exit status, 'timeout after N s' or 'not run: why'")


def hypotheses(logs: Path) -> list[dict]:
    """LOGS/hypotheses.txt's rows: id, limit, name, file, modes, env."""
    rows = []
    for line in (logs / "hypotheses.txt").read_text().splitlines():
        if line.strip():
            fields = line.split("|")
            if len(fields) != 6:
                raise ValueError(f"hypotheses.txt line {line!r}: expected id|limit|name|file|modes|env")
            rows.append(dict(zip(("id", "limit", "name", "file", "modes", "env"), fields)))
    return rows


def verdict_lines(logs: Path) -> list[str]:
    """One VERDICT line per hypothesis of the run whose files are in `logs`."""
    def read(path: Path) -> str:
        return path.read_text(errors="replace") if path.is_file() else ""
    lines = []
    for h in hypotheses(logs):
        base = logs / f"load_{h['id']}"
        status = read(base.with_suffix(".rc")) or "not run: no status written"
        seconds = read(base.with_suffix(".time")).strip()
        stamp = f"[{seconds} s] " if seconds else ""
        lines.append(f"VERDICT {h['id']} {stamp}{h['name']}: "
                     f"{outcome(status, read(base.with_suffix('.log')), read(base.with_suffix('.stuck')))}")
    return lines


# ------------------------------------------------------------------ a run's record
def parse_verdicts(log: str) -> list[dict]:
    found = []
    for line in log.splitlines():
        m = VERDICT.match(line.strip())
        if m:
            text = m["outcome"]
            kind = next(k for k in OUTCOMES if text.startswith(k))
            found.append({"id": m["id"] or "INPROC", "hypothesis": m["name"],
                          "outcome": "not run" if kind == "not tried" else kind,
                          "detail": text[len(kind):].strip(" :"),
                          "seconds": float(m["seconds"]) if m["seconds"] else None})
    if not found:
        raise ValueError("no VERDICT lines in the probe's log")
    return found


def sections(env: str) -> dict[str, list[str]]:
    """environment.txt's '--- title' sections: title -> its lines."""
    out: dict[str, list[str]] = {}
    title = None
    for line in env.splitlines():
        if line.startswith("--- "):
            title = line[4:].strip()
            out[title] = []
        elif title is not None and line.strip():
            out[title].append(line.strip())
    return out


def environment(env: str) -> dict:
    """GPU, driver, versions and compilers from environment.txt."""
    sec, info = sections(env), {}
    smi = next(iter(sec.get("nvidia-smi", [])), "")
    if smi.count(",") >= 2:
        info["gpu"], info["driver"], info["compute_capability"] = [s.strip() for s in smi.split(",")[:3]]
    torch_line = next(iter(sec.get("torch", [])), "")
    m = re.match(r"(\S+) cuda (\S+)", torch_line)
    if m:
        info["torch"], info["cuda"] = m.group(1), m.group(2)
    built = re.search(r"torch built by \[(.*)\]", "\n".join(sec.get("torch", [])))
    if built:
        info["torch_built_by"] = ", ".join(s.strip(" '") for s in built.group(1).split(","))
    for line in sec.get("compilers", []):
        if line.startswith("c++ "):
            info["cxx"] = line
        elif line.startswith(("Cuda compilation", "Build cuda")) and "nvcc" not in info:
            info["nvcc"] = line
    for title, lines in sec.items():
        if title.startswith("libstdc++ as g++ finds it"):
            info["libstdcxx_for_gxx"] = lines[:2]
        if title.startswith("core dumps"):
            info["core_dumps"] = title[len("core dumps: "):]
    return info


def wrappers(env: str, log: str) -> dict[str, dict]:
    """Per package variant: the wrapper.so's NEEDED and how it got libstdc++ (shared, its own copy)."""
    out: dict[str, dict] = {}
    for title, lines in sections(env).items():
        m = re.match(r"readelf -d .*/pkg/(\w+?)_x/", title) or re.match(r"wrapper (\w+)", title)
        if m:
            needed = [re.sub(r".*\[(.*)\].*", r"\1", ln) for ln in lines if "(NEEDED)" in ln]
            out.setdefault(m.group(1), {})["needed"] = needed
    for variant, kind in re.findall(r"^LINKED (\w+): libstdc\+\+ (shared|its own copy|not in NEEDED)", log, re.M):
        out.setdefault(variant, {})["libstdcxx"] = kind
    for variant, line in re.findall(r"^LINKTRACE (\w+): (.*)$", log, re.M):
        out.setdefault(variant, {}).setdefault("link_trace", []).append(line.strip())
    for variant, info in out.items():
        if "libstdcxx" not in info and "needed" in info:
            info["libstdcxx"] = "shared" if any("libstdc++" in n for n in info["needed"]) else "not in NEEDED"
    return out


def builds(log: str) -> dict[str, dict]:
    out = {}
    for m in re.finditer(r"^BUILT (\w+): import\+init ([\d.]+) s, export ([\d.]+) s, "
                         r"aoti_compile_and_package ([\d.]+) s", log, re.M):
        out[m.group(1)] = {"import_init_s": float(m.group(2)), "export_s": float(m.group(3)),
                           "package_s": float(m.group(4))}
    for m in re.finditer(r"^BUILD (\w+) failed (.*)$", log, re.M):
        out[m.group(1)] = {"failed": m.group(2)}
    return out


def short_function(text: str) -> str:
    """A demangled C++ name without its template arguments and parameters: 'ns::Class::method'."""
    name = text.replace("(anonymous namespace)", "{anonymous}")
    while True:  # innermost bracket pairs first, until none is left
        stripped = re.sub(r"<[^<>]*>|\([^()]*\)", "", name)
        if stripped == name:
            break
        name = stripped
    words = [w for w in name.replace("[abi:cxx11]", "").split() if w not in ("const", "volatile", "&", "&&")]
    return words[-1] if words else text


def crash_frames(backtrace: str, limit: int = 30) -> list[dict]:
    """gdb's frames, innermost first, each {function, library} (library: the file's name)."""
    frames = []
    for line in backtrace.splitlines():
        m = re.match(r"^#(\d+)\s+(?:0x[0-9a-f]+ in )?(.*?)(?: from (\S+))?$", line)
        if m and len(frames) < limit:
            library = Path(m.group(3)).name if m.group(3) else ""
            # the wrapper's name is a hash, new for every package: keep what it is
            library = "wrapper.so" if library.endswith(".wrapper.so") else library
            frames.append({"function": short_function(m.group(2)), "library": library})
    return frames


def record(log: str, env: str = "", backtrace: str = "", date: str | None = None) -> dict:
    """The results record of one probe run."""
    limits = re.search(r"^=== loading \((?:at most \d+ at once; )?limit (\d+) s", log, re.M)
    rec = {
        "record": NAME, "title": TITLE, "probe": "tools/gpu_aot_loader_probe.sh",
        "date": date or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "environment": environment(env),
        "verdicts": parse_verdicts(log),
        "builds": builds(log),
        "wrappers": wrappers(env, log),
        "load_limit_s": int(limits.group(1)) if limits else None,
        "phases_s": {m.group(1): int(m.group(2)) for m in
                     re.finditer(r"^=== (builds|loads|probe) done after (\d+) s", log, re.M)},
    }
    signal = re.search(r"received signal (SIG[A-Z]+)", backtrace)
    if signal:
        rec["backtrace"] = {"signal": signal.group(1), "frames": crash_frames(backtrace)}
    return rec


# ------------------------------------------------------------------ the markdown the note includes
def cell(text: str, width: int = 150) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 3] + "..."


def render(rec: dict) -> str:
    env = rec.get("environment", {})
    machine = ", ".join(p for p in (
        f"{env.get('gpu', '?')} (driver {env.get('driver', '?')}, compute capability {env.get('compute_capability', '?')})",
        f"torch {env.get('torch', '?')} (CUDA {env.get('cuda', '?')})", env.get("cxx", "")) if p)
    lines = [f"_{rec['title']}: `{rec['probe']}` on {machine}; {rec['date']}._", "",
             "| id | hypothesis | verdict | details | s |", "|---|---|---|---|---|"]
    for v in rec["verdicts"]:
        seconds = f"{v['seconds']:.1f}" if v.get("seconds") is not None else "-"
        lines.append(f"| {v['id']} | {cell(v['hypothesis'], 90)} | {v['outcome']} | {cell(v['detail'])} | {seconds} |")
    if rec.get("wrappers"):
        lines.append("")
        for variant, info in sorted(rec["wrappers"].items()):
            needed = ", ".join(info.get("needed", [])) or "?"
            lines.append(f"- wrapper.so of `{variant}`: libstdc++ {info.get('libstdcxx', '?')}; NEEDED {needed}")
    bt = rec.get("backtrace")
    if bt:
        shown, seen = [], set()
        for f in bt["frames"]:
            if f["library"].startswith("libtorch_python"):
                break
            key = (f["function"], f["library"])
            if key not in seen:
                seen.add(key)
                shown.append(f"`{f['function']}` ({f['library'] or '?'})")
        lines += ["", f"Where it died ({bt['signal']}, gdb, innermost first, repeats left out): " + " < ".join(shown)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("verdicts")
    p.add_argument("logs", type=Path)
    p = sub.add_parser("record")
    p.add_argument("--log", type=Path, required=True)
    p.add_argument("--env", type=Path)
    p.add_argument("--backtrace", type=Path)
    p.add_argument("--date")
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("render")
    p.add_argument("json", type=Path)
    p.add_argument("--check", type=Path)
    args = parser.parse_args(argv)
    if args.command == "verdicts":
        print("\n".join(verdict_lines(args.logs)))
        return 0
    if args.command == "record":
        def read(path):
            return path.read_text(errors="replace") if path and path.is_file() else ""
        rec = record(read(args.log), read(args.env), read(args.backtrace), args.date)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{NAME}.json").write_text(json.dumps(rec, indent=1) + "\n")
        (args.out / f"{NAME}.md").write_text(render(rec))
        return 0
    text = render(json.loads(args.json.read_text()))
    if args.check:
        if args.check.read_text() != text:
            print(f"{args.check} is not the rendering of {args.json}: "
                  f"python tools/aot_probe_record.py render {args.json} > {args.check}", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

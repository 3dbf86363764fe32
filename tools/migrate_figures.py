"""Convert the old figure markers of notes to named citations (classroom/figures.py), for merges.

    python tools/migrate_figures.py FILE.md ...     # then: python -m course report

The old marker held its whole spec inside the sentence, `<!-- fig NAME SELECTOR -->1.33<!-- /fig -->`.
Each one becomes `[1.33][name]`, and the note's figures block (created at its end if it has none)
gets `[name]: LINK "SELECTOR"`, LINK the results file relative to the note (a pool `A+B`: their
folder, the names first in the title). A spec cited twice gets one name. Names are derived from the
spec (file, variant, field, then what tells them apart: size, agg, format) and may be renamed by
hand: a name is written in its citations and its definition only. Paragraphs that citations push
past figures.MAX_LINE are rewrapped to WIDTH; a table row cannot be, so one that stays too long is
named for `report --check` to flag (shorten its names by hand). Files without old markers are left
as they are. Old NAME forms: `NAME` (the note's week's results/), `week3/NAME`, and in the
top-level README a path from the root (`tests/skips_cpu`).
"""
from __future__ import annotations

import collections
import os
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from classroom import figures  # noqa: E402  (run as a script from tools/)
from course import weeks  # noqa: E402

OLD = re.compile(r"<!-- fig (?P<spec>.*?) -->(?P<value>.*?)<!-- /fig -->")
WIDTH = 100
# Shorter words for names: the name only has to find its definition, the number is beside it.
PHRASES = [("cross_entropy", "ce"), ("flash_attention", "fa"), ("speedup_vs_torch", "x"),
           ("pct_of_copy", "pct"), ("peak_mem_bytes", "mem"), ("torch_compile", "compile"),
           ("vector_add", "vadd"), ("notes_measurements", "notes"), ("compile_benchmark", "compile"),
           ("attention_naive_vs_fused", "attn_nvf"), ("linear", "lin"), ("ncu_hopper", "ncu"),
           ("exact_match", "exact"), ("_graph", "_g"), ("_bucketed", "_bkt"), ("density", "dens"),
           ("_infer", "_inf"), ("causal", "c"), ("fwdbwd", "fb"), ("tflops", "tf"), ("triton_", ""),
           ("tokens_per_s", "tok_s"), ("scaling_efficiency", "scaling"), ("speedup_vs_", "x_"),
           ("rel_error", "err"), ("elementwise", "elt"), ("histogram", "hist"), ("transfers", "xfer"),
           ("capstone_", ""), ("_per_", "_"), ("predicted_", "pred_")]
WORDS = {"attention": "attn", "bfloat16": "bf16", "float16": "f16", "float32": "f32", "layernorm": "ln",
         "rmsnorm": "rms", "triton": "tri", "matmul": "mm", "autotune": "tune", "reduction": "red"}
CAP = 26


def abbr(text: str) -> str:
    text = text.lower()
    for long, short in PHRASES:
        text = text.replace(long, short)
    return "_".join(WORDS.get(p, p) for p in re.split(r"[^a-z0-9]+", text) if p)


def parse(spec: str) -> tuple[str, dict]:
    words = shlex.split(spec)
    return words[0], dict(w.partition("=")[::2] for w in words[1:])


def stem_tokens(name: str) -> list[str]:
    return abbr(re.sub(r"_week\d+", "", name.split("+")[0].split("/")[-1])).split("_")


def size_tokens(size: str) -> list[str]:
    size = size.replace("=", "").replace("^", "p")
    return [abbr(t) for t in re.split(r"[ ,]+", size) if abbr(t)]


def format_tag(opts: dict) -> str:
    tag = ""
    if "fmt" in opts:
        m = re.match(r"\.(\d+)([a-z])", opts["fmt"])
        tag = f"p{m[1]}" if m and m[2] == "f" else ("e" if m else "")
    if "scale" in opts:
        tag += "s" + re.sub(r"[^0-9]", "", opts["scale"])[:3]
    return tag


def features(spec: str, common: set, one_file: bool):
    """(file tag, core, detail, agg, format) of a spec: the words its name is built from."""
    name, opts = parse(spec)
    tag = [] if one_file else (["all"] if "+" in name else [t for t in stem_tokens(name) if t not in common][:2])
    if "path" in opts:
        core = abbr(opts["path"].split(".")[-1]).split("_")[:3]
        detail = [abbr(p) for p in opts["path"].split(".")[:-1]]
    else:
        core = (abbr(opts["variant"]).split("_") + (["vs"] + abbr(opts["over"]).split("_") if "over" in opts else [])
                + [abbr(opts["field"])])
        detail = size_tokens(opts["size"]) if "size" in opts else ["all"]
    return tag, core, detail, [opts["agg"]] if "agg" in opts else [], format_tag(opts)


def joined(tokens: list[str]) -> str:
    out = []
    for t in tokens:
        if t and (not out or out[-1] != t):
            out.append(t)
    return "_".join(out)


def names_for(specs: list[str], taken: set) -> dict[str, str]:
    """A name per spec, unique in the note (and not in `taken`)."""
    files = {parse(s)[0] for s in specs}
    common = set.intersection(*(set(stem_tokens(f)) for f in files))
    feats = {s: features(s, common, len(files) == 1) for s in specs}
    groups = collections.defaultdict(list)
    for s in specs:
        groups[tuple(feats[s][0] + feats[s][1])].append(s)
    out = {}
    for group in groups.values():
        extra = {s: [] for s in group}
        if len(group) > 1:   # tell them apart: the detail words they do not share, then agg, then format
            shared = set.intersection(*(set(feats[s][2]) for s in group))
            extra = {s: [t for t in feats[s][2] if t not in shared][:3] for s in group}
            for s in group:
                if sum(extra[x] == extra[s] for x in group) > 1:
                    extra[s] = extra[s] + feats[s][3]
            for s in group:
                same = [x for x in group if extra[x] == extra[s]]
                if len(same) > 1 and len({feats[x][4] for x in same}) > 1 and feats[s][4]:
                    extra[s] = extra[s] + [feats[s][4]]
        for s in group:
            tag, core = list(feats[s][0]), feats[s][1]
            name = joined(tag + core + extra[s])
            while len(name) > CAP and tag:   # the file's tag goes first
                tag.pop()
                name = joined(tag + core + extra[s])
            out[s] = name
    while len(set(out.values())) < len(out) or set(out.values()) & taken:
        seen = collections.Counter(out.values())
        count = collections.Counter()
        for s in out:
            if seen[out[s]] > 1 or out[s] in taken:
                count[out[s]] += 1
                out[s] = f"{out[s]}_{count[out[s]]}"
    return out


def old_file(note: Path, name: str) -> Path:
    if note.parent == ROOT:
        return ROOT / f"{name}.json"
    if "/" in name:
        week, name = name.split("/", 1)
        return ROOT / weeks.resolve(week).package / "results" / f"{name}.json"
    return ROOT / note.relative_to(ROOT).parts[0] / "results" / f"{name}.json"


def definition(note: Path, name: str, spec: str) -> str:
    first, _, selector = spec.partition(" ")
    files = [old_file(note, n) for n in first.split("+")]
    if len(files) == 1:
        link, title = os.path.relpath(files[0], note.parent), selector
    else:
        if len({f.parent for f in files}) != 1:
            raise SystemExit(f"{note}: `{first}` pools files of several folders; split the figure")
        link = os.path.relpath(files[0].parent, note.parent) + "/"
        title = "+".join(f.stem for f in files) + " " + selector
    quote = "'" if '"' in title else '"'
    return f"[{name}]: {link} {quote}{title}{quote}"


def prose_parts(lines: list[str]):
    """(line index, parts) outside code fences and the figures block; odd parts are code spans."""
    for i, _ in figures.prose_lines("\n".join(lines)):
        yield i, figures.CODE_SPAN.split(lines[i])


def convert(note: Path) -> int:
    lines = note.read_text().rstrip("\n").split("\n")
    specs = list(dict.fromkeys(m["spec"] for _, parts in prose_parts(lines)
                               for part in parts[0::2] for m in OLD.finditer(part)))
    if not specs:
        return 0
    existing = figures.definitions("\n".join(lines), str(note))
    known = {(link, spec): name for name, (_, link, spec) in existing.items()}
    names = names_for(specs, set(existing))
    for s in specs:   # a figure the block already defines keeps its name
        line = figures.DEFINE.match(definition(note, "x", s))
        names[s] = known.get((line["dest"], line["spec"]), names[s])
    for i, parts in prose_parts(lines):
        parts[0::2] = [OLD.sub(lambda m: f"[{m['value']}][{names[m['spec']]}]", p) for p in parts[0::2]]
        lines[i] = "".join(parts)
    new = [definition(note, names[s], s) for s in specs if names[s] not in existing]
    text = "\n".join(lines + ([] if existing else ["", figures.BLOCK_LINE]) + new) + "\n"
    note.write_text(reflow(text))
    return len(specs)


# ----------------------------------------------------------------------------- reflow
LINE_BLOCK = re.compile(r"^(#{1,6}(\s|$)|\||<|```|~~~|=+\s*$|-{3,}\s*$|\*{3,}\s*$|_{3,}\s*$)")
WORD_BLOCK = re.compile(r"^([-+*]|\d+[.)]|#{1,6}|>|=+|-+|\|.*|<.*|```.*|~~~.*)$")   # never starts a line
ITEM = re.compile(r"^(\s*)([-+*]|\d+[.)]) +")


def words(text: str) -> list[str]:
    """Split at spaces outside code spans, [brackets] and link (targets)."""
    out, cur, i, depth, paren = [], "", 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "`":
            n = len(re.match(r"`+", text[i:])[0])
            j = text.find("`" * n, i + n)
            while j != -1 and text[j + n:j + n + 1] == "`":
                j = text.find("`" * n, j + n + 1)
            end = i + n if j == -1 else j + n
            cur, i = cur + text[i:end], end
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "(" and (paren or cur.endswith("]")):
            paren += 1
        elif ch == ")" and paren:
            paren -= 1
        if ch == " " and depth == 0 and paren == 0:
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    return out + ([cur] if cur else [])


def too_long(line: str, defined: dict) -> bool:
    bare = figures.CITE.sub(lambda m: m["value"] if m["name"] in defined else m[0], line)
    return len(line) > figures.MAX_LINE and len(bare) <= figures.MAX_LINE


def fill_paragraph(para: list[str]) -> list[str]:
    item = ITEM.match(para[0])
    first = item.group(0) if item else re.match(r"\s*", para[0]).group(0)
    cont = re.match(r"\s*", para[1]).group(0) if len(para) > 1 else " " * len(first)
    ws = words(" ".join(line.strip() if k else line[len(first):].strip() for k, line in enumerate(para)))
    out, prefix, cur = [], first, []
    for w in ws:
        if cur and len(prefix + " ".join(cur + [w])) > WIDTH and not WORD_BLOCK.match(w):
            out.append(prefix + " ".join(cur))
            prefix, cur = cont, [w]
        else:
            cur.append(w)
    return out + [prefix + " ".join(cur)]


def reflow(text: str) -> str:
    """`text` with every paragraph that holds a line citations push past MAX_LINE refilled."""
    defined = figures.definitions(text)
    lines = text.split("\n")
    prose = {i for i, _ in figures.prose_lines(text)}
    out, i = [], 0
    while i < len(lines):
        stripped = lines[i].strip()
        quote = stripped.startswith(">")
        if not (i in prose and stripped and not LINE_BLOCK.match(stripped)
                and (ITEM.match(lines[i]) or len(lines[i]) - len(lines[i].lstrip()) < 4)):
            out.append(lines[i])
            i += 1
            continue
        j = i + 1
        while (j < len(lines) and j in prose and lines[j].strip() and not LINE_BLOCK.match(lines[j].strip())
               and not ITEM.match(lines[j]) and not lines[j - 1].endswith(("  ", "\\"))
               and lines[j].lstrip().startswith(">") == quote):
            j += 1
        para = lines[i:j]
        hard_break = any(line.endswith(("  ", "\\")) for line in para[:-1])
        if not any(too_long(line, defined) for line in para) or hard_break:
            out.extend(para)
        elif quote:
            if all(line.startswith("> ") for line in para):
                out.extend("> " + line for line in fill_paragraph([line[2:] for line in para]))
            else:
                out.extend(para)
        else:
            out.extend(fill_paragraph(para))
        i = j
    return "\n".join(out)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        path = Path(arg).resolve()
        n = convert(path)
        if n:
            print(f"{path.relative_to(ROOT)}: {n} figures named")
        problems = figures.problems(path.read_text(), str(path.relative_to(ROOT)))
        for problem in problems:
            print("  " + problem)

#!/usr/bin/env python3
"""Checks the documentation: README.md, docs/*.md and tests/README.md (python3, stdlib only).

Links: every relative link must point to a file or directory of the repository, and a link with
an #anchor to a heading of the Markdown file it names (GitHub's slugs: lower case, punctuation
dropped, spaces to hyphens, -1, -2, ... for repeats). http(s) links are checked for their form
only (no network here).

Command blocks: every fenced block whose info string is sh, bash, shell or console is run, with
bash -euo pipefail, the karpenter-rs binary first on PATH ($KARPENTER_RS_BIN, else
${CARGO_TARGET_DIR:-target}/debug/karpenter-rs, built when missing), a timeout of 30 s, from the
repository's root. It must exit 0. So that no block reaches a cluster or an AWS account by
mistake, kubectl, helm, aws, eksctl and docker are stand-ins that fail naming the block, and the
AWS credential variables are unset. When the block is followed directly (only blank lines between)
by a ```text block, its standard output must be that text (trailing spaces aside). An HTML comment
on the line just above the opening fence changes this:

  <!-- docs-check: skip (needs an EKS cluster) -->   not run; the reason is required and printed
  <!-- docs-check: run in tests/fixtures/x -->       run from that directory (relative to the root)
  <!-- docs-check: run in a temporary directory -->  run from a new empty directory

Usage: python3 tests/docs_check.py [FILE.md ...]   (default: every documentation file)
Exit status 1 when a link or a block fails; the last line counts what was checked.
"""

import os
import re
import subprocess
import sys
import tempfile
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND_LANGS = {"sh", "bash", "shell", "console"}
TIMEOUT = 30
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)")
MARK = re.compile(r"^\s*<!--\s*docs-check:\s*(.*?)\s*-->\s*$")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def doc_files():
    files = ["README.md", "tests/README.md"]
    docs = os.path.join(ROOT, "docs")
    if os.path.isdir(docs):
        files += sorted("docs/" + f for f in os.listdir(docs) if f.endswith(".md"))
    return [f for f in files if os.path.exists(os.path.join(ROOT, f))]


def blocks_and_prose(lines):
    """(fenced blocks, prose lines): blocks as dicts (lang, start, end, body, mark); prose as
    (line number, text) outside fences."""
    blocks, prose = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append((i, lines[i]))
            i += 1
            continue
        fence, lang = m.group(2), m.group(3).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[0] * len(fence)):
            j += 1
        mark = None
        k = i - 1
        if k >= 0 and MARK.match(lines[k]):
            mark = MARK.match(lines[k]).group(1)
        indent = m.group(1)
        body = [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[i + 1 : j]]
        blocks.append({"lang": lang, "start": i, "end": j, "body": "\n".join(body), "mark": mark})
        i = j + 1
    return blocks, prose


def slug(heading, seen):
    text = re.sub(r"<[^>]+>", "", heading.strip())
    text = text.lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    text = text.replace(" ", "-")
    n = seen.get(text, 0)
    seen[text] = n + 1
    return text if n == 0 else f"{text}-{n}"


ANCHORS = {}


def anchors(path):
    if path not in ANCHORS:
        with open(path, encoding="utf-8") as f:
            _, prose = blocks_and_prose(f.read().split("\n"))
        seen, found = {}, set()
        for _, line in prose:
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                found.add(slug(m.group(2), seen))
        ANCHORS[path] = found
    return ANCHORS[path]


def strip_code_spans(line):
    return re.sub(r"(`+).*?\1", "", line)


def check_links(rel, prose, errors):
    path = os.path.join(ROOT, rel)
    count = 0
    for n, line in prose:
        for target in LINK.findall(strip_code_spans(line)):
            count += 1
            where = f"{rel}:{n + 1}: link {target!r}"
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                parsed = urllib.parse.urlparse(target)
                if parsed.scheme in ("http", "https"):
                    if not parsed.netloc or " " in target:
                        errors.append(f"{where}: not a well-formed URL")
                elif parsed.scheme != "mailto":
                    errors.append(f"{where}: unknown scheme {parsed.scheme!r}")
                continue
            file_part, _, anchor = target.partition("#")
            dest = path if not file_part else os.path.normpath(os.path.join(os.path.dirname(path), urllib.parse.unquote(file_part)))
            if not dest.startswith(ROOT + os.sep) and dest != ROOT:
                errors.append(f"{where}: points outside the repository")
                continue
            if not os.path.exists(dest):
                errors.append(f"{where}: {os.path.relpath(dest, ROOT)} does not exist")
                continue
            if anchor:
                if not dest.endswith(".md") or os.path.isdir(dest):
                    errors.append(f"{where}: an anchor into a file that is not Markdown")
                elif anchor not in anchors(dest):
                    errors.append(f"{where}: no heading #{anchor} in {os.path.relpath(dest, ROOT)}")
    return count


# Stand-ins for the tools that act on a cluster or an AWS account: a block that calls one must be
# marked skip.
SHIMS = tempfile.TemporaryDirectory(prefix="docs-check-")
for tool in ("kubectl", "helm", "aws", "eksctl", "docker"):
    with open(os.path.join(SHIMS.name, tool), "w") as f:
        f.write(f"#!/bin/sh\necho 'docs-check: this block calls {tool}, which needs a cluster or an AWS account: mark it <!-- docs-check: skip (why) -->' >&2\nexit 97\n")
    os.chmod(os.path.join(SHIMS.name, tool), 0o755)


def binary():
    exe = os.environ.get("KARPENTER_RS_BIN")
    if exe and os.path.exists(exe):
        return os.path.abspath(exe)
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    exe = os.path.join(target, "debug", "karpenter-rs")
    if not os.path.exists(exe):
        subprocess.run(["cargo", "build", "--quiet", "--bin", "karpenter-rs"], cwd=ROOT, check=True)
    return exe


def run_block(rel, block, following, exe, errors, skipped):
    where = f"{rel}:{block['start'] + 1}"
    mark = block["mark"] or ""
    if mark.startswith("skip"):
        m = re.match(r"skip\s*\((.+)\)$", mark)
        if not m:
            errors.append(f"{where}: a skip needs its reason: <!-- docs-check: skip (why) -->")
        else:
            skipped.append(f"{where} ({m.group(1)})")
        return 0
    cwd, tmp = ROOT, None
    if mark:
        m = re.match(r"run in (.+)$", mark)
        if not m:
            errors.append(f"{where}: unknown docs-check mark {mark!r}")
            return 0
        if m.group(1) == "a temporary directory":
            tmp = tempfile.TemporaryDirectory()
            cwd = tmp.name
        else:
            cwd = os.path.join(ROOT, m.group(1))
            if not os.path.isdir(cwd):
                errors.append(f"{where}: no directory {m.group(1)}")
                return 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "KUBECONFIG"}
    env["PATH"] = os.pathsep.join([SHIMS.name, os.path.dirname(exe), os.environ.get("PATH", "")])
    try:
        out = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block["body"]],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        errors.append(f"{where}: did not finish in {TIMEOUT} s")
        return 1
    finally:
        if tmp:
            tmp.cleanup()
    if out.returncode != 0:
        errors.append(f"{where}: exit status {out.returncode}\n{block['body']}\n--- stderr:\n{out.stderr.strip()}")
        return 1
    if following is not None:
        want = [l.rstrip() for l in following["body"].strip("\n").split("\n")]
        got = [l.rstrip() for l in out.stdout.strip("\n").split("\n")]
        if want != got:
            errors.append(f"{where}: output differs from the text block at line {following['start'] + 1}; it printed:\n" + "\n".join(got))
    return 1


def main(argv):
    files = argv[1:] or doc_files()
    errors, skipped = [], []
    links = ran = compared = 0
    exe = None
    for rel in files:
        rel = os.path.relpath(os.path.abspath(rel), ROOT) if os.path.isabs(rel) else rel
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            lines = f.read().split("\n")
        blocks, prose = blocks_and_prose(lines)
        links += check_links(rel, prose, errors)
        for i, block in enumerate(blocks):
            if block["lang"] not in COMMAND_LANGS:
                continue
            following = None
            if i + 1 < len(blocks) and blocks[i + 1]["lang"] == "text":
                between = lines[block["end"] + 1 : blocks[i + 1]["start"]]
                if all(not l.strip() for l in between):
                    following = blocks[i + 1]
            if exe is None and not (block["mark"] or "").startswith("skip"):
                exe = binary()
            did = run_block(rel, block, following, exe, errors, skipped)
            ran += did
            compared += did and following is not None
    for s in skipped:
        print(f"docs-check: skipped {s}")
    for e in errors:
        print(f"docs-check: FAILED {e}", file=sys.stderr)
    print(
        f"docs-check: {len(files)} files, {links} links, {ran} command blocks run "
        f"({compared} with their output compared), {len(skipped)} skipped, {len(errors)} failures"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

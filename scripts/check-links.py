#!/usr/bin/env python3
"""Every relative link of the documentation leads somewhere (ctest docs_links, part of `make unit`).

Reads README.md, docs/*.md and charts/*/README.md under --root and checks each Markdown link
[text](target) and each reference definition [label]: target outside code:
  1. a target with a scheme (https:, mailto:) is left alone;
  2. a relative path must name a file or directory that exists, resolved from the linking file's
     directory, and must not leave the repository;
  3. a #anchor (alone: the same file; after a path: that file) must be the id GitHub gives one of
     the target file's headings: lower case, everything but letters, digits, spaces, '-' and '_'
     dropped, spaces turned into '-', and "-1", "-2", ... added to repeats; or an explicit
     <a id="..."> / <a name="...">; an anchor into a file that is not Markdown is not checked
     (#L10 into a source file).
Prints one line per broken link, "FILE:LINE: TARGET: why", and exits 1 when there is one.

  --self-test   first checks the checker against a made-up tree with known broken links, so that
                the test fails if the checker stops finding them
"""
import argparse
import glob
import os
import re
import sys
import tempfile

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:[^>]*\s)?(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
# [text](target) or [text](target "title"); text may hold one level of brackets ([`a[0]`](x)).
INLINE_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def without_code_spans(line):
    """The line with its `code spans` blanked out (same length, so columns stay)."""
    out = []
    i = 0
    while i < len(line):
        if line[i] == "`":
            run = len(line[i:]) - len(line[i:].lstrip("`"))
            end = line.find("`" * run, i + run)
            while end != -1 and end + run < len(line) and line[end + run] == "`":
                end = line.find("`" * run, end + run + 1)
            if end == -1:
                out.append(line[i:i + run])
                i += run
                continue
            out.append(" " * (end + run - i))
            i = end + run
            continue
        out.append(line[i])
        i += 1
    return "".join(out)


def prose_lines(text):
    """(line number, line) for every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                continue
            yield number, line
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                and line.strip() == match.group(1):
            fence = None


def slug(heading):
    """The id GitHub gives a heading, before repeats are numbered."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*|(?<!\w)_|_(?!\w))", "", text)  # emphasis markers
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(text):
    """Every anchor a Markdown file defines: its headings' ids and explicit <a id/name>."""
    found = set()
    seen = {}
    for _, line in prose_lines(text):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ANCHOR.findall(line))
    return found


def links(text):
    """(line number, target) for every link outside code."""
    for number, line in prose_lines(text):
        prose = without_code_spans(line)
        definition = REFERENCE_DEFINITION.match(prose)
        if definition:
            yield number, definition.group(1)
            continue
        for match in INLINE_LINK.finditer(prose):
            yield number, match.group(1)


def documents(root):
    files = [os.path.join(root, "README.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    files += sorted(glob.glob(os.path.join(root, "charts", "*", "README.md")))
    return [f for f in files if os.path.isfile(f)]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def check(root):
    """The broken links under root, as "FILE:LINE: TARGET: why" lines."""
    root = os.path.realpath(root)
    problems = []
    anchor_cache = {}

    def anchors_of(path):
        if path not in anchor_cache:
            anchor_cache[path] = anchors(read(path))
        return anchor_cache[path]

    for document in documents(root):
        shown = os.path.relpath(document, root)
        for number, target in links(read(document)):
            if not target or SCHEME.match(target):
                continue
            path_part, _, anchor = target.partition("#")
            if path_part:
                resolved = os.path.realpath(os.path.join(os.path.dirname(document), path_part))
                if os.path.relpath(resolved, root).startswith(".."):
                    problems.append(f"{shown}:{number}: {target}: leaves the repository")
                    continue
                if not os.path.exists(resolved):
                    problems.append(f"{shown}:{number}: {target}: no such file")
                    continue
            else:
                resolved = document
            if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
                if anchor not in anchors_of(resolved):
                    where = os.path.relpath(resolved, root)
                    problems.append(f"{shown}:{number}: {target}: no heading #{anchor} in {where}")
    return problems


def self_test():
    """The checker against a made-up tree: it must find exactly the broken links planted there."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "charts", "c"))
        os.makedirs(os.path.join(root, "src"))
        with open(os.path.join(root, "src", "a.h"), "w") as f:
            f.write("// a\n")
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write(
                "# Title\n"
                "## `kubectl x` flags, and more\n"
                "## Repeat\n"
                "## Repeat\n"
                "See [guide](docs/guide.md#the-steps), [flags](#kubectl-x-flags-and-more),\n"
                "[second](#repeat-1), [source](src/a.h#L3), [web](https://example.com/x#y),\n"
                "[mail](mailto:a@example.com), [dir](docs/), [chart](charts/c/README.md).\n"
                "Broken: [gone](docs/gone.md), [anchor](docs/guide.md#no-such-heading).\n"
                "Broken too: [self](#missing), [third](#repeat-2).\n"
                "`[in code](docs/gone-in-code.md)` is not a link.\n"
                "```\n"
                "[in a fence](docs/gone-in-fence.md)\n"
                "# not a heading\n"
                "```\n"
                "[ref]: docs/gone-by-reference.md\n")
        with open(os.path.join(root, "docs", "guide.md"), "w") as f:
            f.write("# Guide\n\n## The steps\n\n<a id=\"kept\"></a>\n"
                    "Back to [the top](../README.md#title), [kept](#kept), "
                    "[fence](#not-a-heading).\n")
        with open(os.path.join(root, "charts", "c", "README.md"), "w") as f:
            f.write("[up](../../docs/guide.md#the-steps) [out](../../../elsewhere.md)\n")
        expected = [
            "README.md:8: docs/gone.md: no such file",
            "README.md:8: docs/guide.md#no-such-heading: no heading #no-such-heading in "
            "docs/guide.md",
            "README.md:9: #missing: no heading #missing in README.md",
            "README.md:9: #repeat-2: no heading #repeat-2 in README.md",
            "README.md:15: docs/gone-by-reference.md: no such file",
            "docs/guide.md:6: #not-a-heading: no heading #not-a-heading in docs/guide.md",
            "charts/c/README.md:1: ../../../elsewhere.md: leaves the repository",
        ]
        found = check(root)
        if sorted(found) != sorted(expected):
            print("self-test failed: the checker found", file=sys.stderr)
            for line in found:
                print("  " + line, file=sys.stderr)
            print("where it should have found", file=sys.stderr)
            for line in expected:
                print("  " + line, file=sys.stderr)
            return False
    slugs = {
        "Faults, in the order the policy checks them": "faults-in-the-order-the-policy-checks-them",
        "`tpujob-operator run` flags": "tpujob-operator-run-flags",
        "Permissions: `patch` on `nodes/status`": "permissions-patch-on-nodesstatus",
        "The [API](api.md) *in short*": "the-api-in-short",
        "snake_case stays": "snake_case-stays",
    }
    for heading, want in slugs.items():
        if slug(heading) != want:
            print(f"self-test failed: slug({heading!r}) is {slug(heading)!r}, not {want!r}",
                  file=sys.stderr)
            return False
    print("self-test passed: the planted broken links were all reported, and only they")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."),
                        help="the repository (default: this script's parent directory)")
    parser.add_argument("--self-test", action="store_true",
                        help="check the checker against a made-up tree first")
    args = parser.parse_args()
    if args.self_test and not self_test():
        return 1
    problems = check(args.root)
    for problem in problems:
        print(problem)
    checked = len(documents(os.path.realpath(args.root)))
    if problems:
        print(f"{len(problems)} broken link(s) in {checked} files", file=sys.stderr)
        return 1
    print(f"every relative link and anchor of {checked} files leads somewhere")
    return 0


if __name__ == "__main__":
    sys.exit(main())

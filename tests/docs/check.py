#!/usr/bin/env python3
"""The docs check: what `mdbook build book` does not catch, on the whole tree.

`tests/docs/check.py [ROOT]` prints one line per problem (`path:line: what`) and exits 1 when
there is any, 0 otherwise; ROOT defaults to the checkout this file is in. It fails on:

1. **Conflict markers**, in every file of the tree: a line that starts with seven `<`, `>`
   or `|` followed by a space or the line's end, and a line of exactly seven `=` in a file
   that has one of those (a lone `=======` is a Markdown underline or a banner, not a
   conflict). Lock files (`Cargo.lock`, `*.lock`, `*-lock.json`, `*-lock.yaml`) are left
   out: they are written by tools and regenerated, not merged by hand. Binary files
   (a NUL byte in their first 8 KiB) are left out.
2. **Dead paths**: a path the docs cite whose first part is a top-level directory of the tree
   (`tests/watch/guard.rs`, `src/budget/`, `packaging/grafana/sandguard.json`) must exist.
   Paths under a directory the tree does not have (`target/…`, `/var/run/…`,
   `$XDG_RUNTIME_DIR/…`) are not the tree's and are not checked, nor a path with a part in
   capitals, which stands for any name (`fuzz/corpus/TARGET/`).
3. **Dead test and module names**: a code span that is only a Rust path in lower case
   (`sweep::concurrent_sweeps_serialise_and_agree`, `proxy::docker`) must name a `fn` in a
   `.rs` file whose module path holds the path's other parts, in order and side by side
   (`tests/sweep/orphans.rs` is `sweep::orphans`, which holds `sweep`), or a module
   (a file, a directory or a `mod` declaration) at the end of such a path. A leading
   `sandguard::` or `crate::` is the crate itself and is dropped. This is how `cargo test`
   filters read: a cited name that matches nothing filters nothing.
4. **Dead links**: a Markdown link to a file of the tree (`[x](book/src/y.md#anchor)`,
   `[x](#anchor)`) must reach a file, and its anchor a heading there, with the anchor
   mdBook and GitHub both give it (lower case; letters, digits, `-` and `_` kept; spaces
   made `-`; everything else dropped; a repeated heading gets `-1`, `-2`, …).
5. **Dead section citations** in words: `README.md, "Install"`, `README: Install`,
   `README, section "X"` must name a heading of README.md; `book: Budgets, "Prices"` a
   chapter (its file's name, or the start of its title) and, when given, a heading of it or
   a paragraph it opens with a bold lead (`**What it says.**`, the book's sub-sections).

Which files are docs (2 to 5): README.md, everything under book/src/, config/ and packaging/
(the text a user reads, and the files they copy). Not src/ nor tests/: what code cites is
kept honest by its own tests, and a citation in a message (src/budget's spend-limit error)
is reworded with its message.

Decisions: a standalone script of the standard library only, so the check runs before
anything is built or installed (tests/run.sh runs it first) and in well under a second;
files are those git knows (tracked, or new and not ignored) when ROOT is a work tree,
every file but .git/, target/ and node_modules/ otherwise (the self-tests' scratch trees).
"""

import os
import re
import subprocess
import sys

DOC_DIRS = ("book/src/", "config/", "packaging/")
DOC_FILES = ("README.md",)
SKIPPED_DIRS = {".git", "target", "node_modules", "__pycache__"}

# Written so that this file holds no marker itself.
MARKER = re.compile(r"^(?:%s|%s|%s)(?: |$)" % ("<" * 7, ">" * 7, r"\|" * 7))
DIVIDER = re.compile(r"^%s$" % ("=" * 7))
LOCK = re.compile(r"(^|/)(Cargo\.lock|[^/]*\.lock|[^/]*-lock\.(json|ya?ml))$")

PATH = re.compile(r"(?<![\w./$~-])([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/?)")
# A part in capitals stands for any name (`fuzz/corpus/TARGET/`).
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")
RUST_PATH = re.compile(r"^[a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)+$")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
BOLD_LEAD = re.compile(r"^\*\*([^*]+?)[.:]?\*\*")
# `README.md, "X"`, `README "X"`, `README, section "X"`; or `README: X` up to punctuation.
README_CITE = re.compile(
    r'README(?:\.md)?(?:,\s*(?:section\s+)?|:\s*|\s+)"([^"]+)"'
    r'|README(?:\.md)?:\s+([A-Z][^,;.()"\n]*)'
)
# `book: Page`, `book: Page, "Section"`, `book: Page, Section`.
BOOK_CITE = re.compile(
    r'\bbook:\s+([A-Z][\w -]*?)(?:,\s*"([^"]+)"|,\s*([A-Z][\w ]*))?(?=[),;."\n]|$)'
)


def files_of(root):
    """Every file of the tree, as paths relative to ROOT with `/`."""
    if git(root, "rev-parse", "--show-prefix") == "":  # ROOT is a work tree's top
        listed = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        # A file deleted but not yet staged is still listed: only what is there counts.
        return sorted(p for p in set(listed.split("\0")) if p and isfile(root, p))
    found = []
    for top, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in names:
            found.append(os.path.relpath(os.path.join(top, name), root).replace(os.sep, "/"))
    return sorted(found)


def git(root, *args):
    """What a git command prints, or None when ROOT is not in a work tree (or no git)."""
    try:
        done = subprocess.run(["git", "-C", root, *args], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.decode().strip("\n")


def isfile(root, rel):
    return os.path.isfile(os.path.join(root, rel))


def read_text(root, rel):
    """The file's text, or None for a binary or unreadable one."""
    try:
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def conflict_markers(rel, text):
    if LOCK.search(rel):
        return []
    lines = text.split("\n")
    if not any(MARKER.match(line) for line in lines):
        return []
    return [
        f"{rel}:{n}: a merge-conflict marker ({line[:7]})"
        for n, line in enumerate(lines, 1)
        if MARKER.match(line) or DIVIDER.match(line)
    ]


def slug(heading):
    """The anchor mdBook (and GitHub) gives a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    out = []
    for ch in text.lower():
        if ch.isalnum() or ch in "_-":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def outside_fences(text):
    """(line number, line) of the lines not inside a fenced code block."""
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


class Tree:
    """What the docs may cite: the files and directories, Markdown headings, Rust modules."""

    def __init__(self, root):
        self.root = root
        self.files = files_of(root)
        self.file_set = set(self.files)
        self.dirs = {p.rsplit("/", i)[0] for p in self.files for i in range(1, p.count("/") + 1)}
        self.top = {p.split("/")[0] for p in self.files if "/" in p}
        self._anchors = {}
        self._rust = None

    def text(self, rel):
        return read_text(self.root, rel)

    def exists(self, rel):
        rel = rel.rstrip("/")
        return rel in self.file_set or rel in self.dirs

    def headings(self, rel):
        """(anchors, plain texts, bold leads) of a Markdown file."""
        if rel not in self._anchors:
            anchors, texts, leads, seen = set(), set(), set(), {}
            for _, line in outside_fences(self.text(rel) or ""):
                m = HEADING.match(line)
                if m:
                    title = m.group(2)
                    custom = re.search(r"\{#([\w-]+)\}\s*$", title)
                    title = re.sub(r"\s*\{#[\w-]+\}\s*$", "", title)
                    base = custom.group(1) if custom else slug(title)
                    count = seen.get(base, 0)
                    seen[base] = count + 1
                    anchors.add(base if count == 0 else f"{base}-{count}")
                    texts.add(plain(title))
                lead = BOLD_LEAD.match(line)
                if lead:
                    leads.add(plain(lead.group(1)))
            self._anchors[rel] = (anchors, texts, leads)
        return self._anchors[rel]

    def rust(self):
        """Per `.rs` file: its module path (parts) and the names it declares (`fn`, `mod`)."""
        if self._rust is None:
            self._rust = []
            for rel in self.files:
                if not rel.endswith(".rs"):
                    continue
                parts = rel[: -len(".rs")].split("/")[1:]
                if parts and parts[-1] in ("mod", "lib", "main", "integration"):
                    parts = parts[:-1]
                text = self.text(rel) or ""
                fns = set(re.findall(r"\bfn\s+([a-z_][a-z0-9_]*)", text))
                mods = set(re.findall(r"\bmod\s+([a-z_][a-z0-9_]*)", text))
                self._rust.append((parts, fns, mods))
        return self._rust

    def names_rust(self, segments):
        """Whether `a::b::c` names a fn or a module of the tree (see the module's docs)."""
        if segments[0] in ("sandguard", "crate"):
            segments = segments[1:]
        *prefix, last = segments
        for parts, fns, mods in self.rust():
            # A file's module path, and each inline or declared module inside it.
            paths = [parts] + [parts + [m] for m in sorted(mods)]
            if last in fns and any(holds(p, prefix) for p in paths):
                return True
            if any(holds(p, segments) for p in paths):
                return True
        return False


def holds(parts, wanted):
    """Whether `wanted` is found in `parts` side by side, in order (an empty one always)."""
    n = len(wanted)
    return any(parts[i : i + n] == wanted for i in range(len(parts) - n + 1))


def plain(text):
    """A heading's words as a citation compares them: no code ticks, no case, one space."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "").replace("*", "")
    return " ".join(text.split()).strip().rstrip(".:").lower()
def is_doc(rel):
    return rel in DOC_FILES or rel.startswith(DOC_DIRS)


def dead_paths(tree, rel, text):
    problems = []
    for n, line in enumerate(text.split("\n"), 1):
        for m in PATH.finditer(line):
            path = m.group(1).rstrip(".")
            first = path.split("/")[0]
            if "/" not in path or first not in tree.top or tree.exists(path):
                continue
            if any(PLACEHOLDER.match(part) for part in path.split("/")):
                continue
            problems.append(f"{rel}:{n}: cites {path}, which is not in the tree")
    return problems


def dead_rust_names(tree, rel, text):
    problems = []
    for n, line in enumerate(text.split("\n"), 1):
        for m in CODE_SPAN.finditer(line):
            name = m.group(1)
            if RUST_PATH.match(name) and not tree.names_rust(name.split("::")):
                problems.append(f"{rel}:{n}: cites `{name}`, which names no test, fn or module")
    return problems


def dead_links(tree, rel, text):
    problems = []
    here = os.path.dirname(rel)
    for n, line in outside_fences(text):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:: not the tree's
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(here, path)).replace(os.sep, "/") if path else rel
            if not tree.exists(dest):
                problems.append(f"{rel}:{n}: links to {target}, and {dest} is not in the tree")
            elif anchor and dest.endswith(".md") and anchor not in tree.headings(dest)[0]:
                problems.append(f"{rel}:{n}: links to {target}; {dest} has no heading #{anchor}")
    return problems


def chapter(tree, page):
    """The book's chapter a citation names: its file's name, or the start of its title."""
    wanted = plain(page)
    for rel in tree.files:
        if not (rel.startswith("book/src/") and rel.endswith(".md")):
            continue
        if os.path.basename(rel)[: -len(".md")] == wanted.replace(" ", "-"):
            return rel
        if plain(title_of(tree.text(rel) or "")).startswith(wanted):
            return rel
    return None


def title_of(text):
    """A chapter's first heading."""
    for _, line in outside_fences(text):
        m = HEADING.match(line)
        if m:
            return m.group(2)
    return ""


def dead_citations(tree, rel, text):
    problems = []
    readme = tree.headings("README.md")[1] if tree.exists("README.md") else set()
    for n, line in enumerate(text.split("\n"), 1):
        at = f"{rel}:{n}: cites"
        for m in README_CITE.finditer(line):
            section = (m.group(1) or m.group(2)).strip()
            if plain(section) not in readme:
                problems.append(f'{at} README\'s "{section}", not a section of README.md')
        for m in BOOK_CITE.finditer(line):
            page, section = m.group(1).strip(), (m.group(2) or m.group(3) or "").strip()
            found = chapter(tree, page)
            if found is None:
                problems.append(f'{at} the book\'s "{page}", not a chapter of book/src/')
                continue
            _, texts, leads = tree.headings(found)
            if section and plain(section) not in texts | leads:
                problems.append(f'{at} "{section}" of {found}, which has no such section')
    return problems


def check(root):
    """Every problem of the tree at ROOT, one line each."""
    tree = Tree(root)
    problems = []
    for rel in tree.files:
        text = tree.text(rel)
        if text is None:
            continue
        problems += conflict_markers(rel, text)
        if is_doc(rel):
            problems += dead_paths(tree, rel, text)
            problems += dead_citations(tree, rel, text)
            if rel.endswith(".md"):
                problems += dead_rust_names(tree, rel, text)
                problems += dead_links(tree, rel, text)
    return problems


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(argv[1] if len(argv) > 1 else os.path.join(here, "..", ".."))
    problems = check(root)
    for p in problems:
        print(p)
    print(f"docs check: {len(problems)} problem(s) in {root}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

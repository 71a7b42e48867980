#!/usr/bin/env python3
"""The docs check's own tests: a small tree that passes, then one planted fault at a time
(a conflict marker, a dead path, a dead test name, a dead anchor, a dead README section, a
dead book section), each of which must fail it, naming the file and line; and what must not
(a marker in a lock file, a lone `=======`, a placeholder path, a link off the tree).

`tests/docs/test_check.py` runs them and prints `docs check self-tests: N passed, N failed`.
"""

import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402

# Built, not written, so that this file holds no marker itself.
OURS, THEIRS, SPLIT = "<" * 7 + " HEAD", ">" * 7 + " branch", "=" * 7

TREE = {
    "README.md": "# tool\n\n## Quick start\n\nSee [the book](book/src/guide.md#first-steps) and "
    "[engines](#quick-start).\n",
    "book/src/SUMMARY.md": "# Summary\n\n- [Guide](guide.md)\n",
    "book/src/guide.md": "# Guide: the long title\n\n## First steps\n\n**What it says.** Words.\n\n"
    "Tested by `tests/watch/guard.rs` (`guard::a_dead_owner_is_reclaimed`) and "
    "`watch::guard`; the corpus in `fuzz/corpus/TARGET/`, built in `target/debug/`.\n"
    "Also [the spec](https://example.com/spec.md#x).\n",
    "config/tool.toml": '# Limits (README.md, "Quick start"; book: Guide, "First steps").\n'
    '# What the run says (book: Guide, "What it says").\n',
    "tests/watch/guard.rs": "#[test]\nfn a_dead_owner_is_reclaimed() {}\n",
    "Cargo.lock": f"{OURS}\nversion = 3\n{SPLIT}\nversion = 4\n{THEIRS}\n",
    "notes.md": f"Title\n{SPLIT}\n\nA lone underline is not a conflict.\n",
}


class DocsCheck(unittest.TestCase):
    def tree(self, changes=None):
        """A scratch tree: TREE with `changes` (path → text appended) applied."""
        root = tempfile.mkdtemp(prefix="docs-check-")
        self.addCleanup(lambda: __import__("shutil").rmtree(root))
        for rel, text in TREE.items():
            text += (changes or {}).get(rel, "")
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        return root

    def fails_with(self, changes, *expected):
        problems = check.check(self.tree(changes))
        self.assertTrue(problems, "the planted fault was not found")
        for words in expected:
            self.assertTrue(any(words in p for p in problems), f"{words!r} not in {problems}")
        return problems

    def test_the_clean_tree_passes(self):
        self.assertEqual(check.check(self.tree()), [])

    def test_a_planted_conflict_marker_fails_with_its_lines(self):
        lines = f"\n{OURS}\nours\n{SPLIT}\ntheirs\n{THEIRS}\n"
        problems = self.fails_with(
            {"book/src/guide.md": lines}, "book/src/guide.md:10: a merge-conflict marker"
        )
        self.assertEqual(len(problems), 3, problems)

    def test_a_conflict_marker_in_code_fails_too(self):
        self.fails_with({"tests/watch/guard.rs": f"{THEIRS}\n"}, "tests/watch/guard.rs:3")

    def test_a_dead_test_path_fails(self):
        self.fails_with(
            {"book/src/guide.md": "See `tests/watch/gone.rs`.\n"}, "cites tests/watch/gone.rs"
        )

    def test_a_dead_path_in_a_config_comment_fails(self):
        planted = {"config/tool.toml": "# see tests/image.rs\n"}
        self.fails_with(planted, "config/tool.toml:3: cites tests/image.rs")

    def test_a_dead_test_name_fails(self):
        self.fails_with(
            {"README.md": "Run `trust::a_dead_owner_is_reclaimed`.\n"}, "`trust::a_dead_owner"
        )

    def test_a_dead_anchor_fails(self):
        self.fails_with(
            {"README.md": "[x](book/src/guide.md#last-steps)\n"}, "has no heading #last-steps"
        )

    def test_a_link_to_a_missing_file_fails(self):
        self.fails_with(
            {"book/src/guide.md": "[x](missing.md)\n"}, "book/src/missing.md is not in the tree"
        )

    def test_a_dead_readme_section_fails(self):
        self.fails_with({"config/tool.toml": '# README.md, "Budgets"\n'}, 'README\'s "Budgets"')

    def test_a_dead_book_section_fails(self):
        self.fails_with(
            {"config/tool.toml": '# (book: Guide, "Prices")\n'}, '"Prices" of book/src/guide.md'
        )


def main():
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(DocsCheck)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    failed = len(result.failures) + len(result.errors)
    print(f"docs check self-tests: {result.testsRun - failed} passed, {failed} failed")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())

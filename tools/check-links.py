#!/usr/bin/env python3
"""Checks the Markdown links of README.md and docs/: every relative link names a file
that exists, and every #anchor a heading of its page (GitHub's slugs: lower case,
punctuation dropped, spaces to hyphens, repeats numbered) or an <a id="..."> in it. Prints each broken link as
file:line and exits 1 if any. Links to other sites are not followed (CI has no network).

usage: tools/check-links.py [repository root]"""
import pathlib
import re
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
HTML_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def slug(text):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_code(path):
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for _, line in lines_outside_code(path):
            found.update(HTML_ID.findall(line))
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    pages = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    broken = 0
    for page in pages:
        for number, line in lines_outside_code(page):
            for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
                target = m.group(1) or m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto: ...
                    continue
                file_part, _, anchor = target.partition("#")
                linked = (page.parent / file_part).resolve() if file_part else page
                where = f"{page.relative_to(root)}:{number}: {target}"
                if not linked.exists():
                    print(f"{where}: no such file")
                    broken += 1
                elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                    print(f"{where}: no heading with that anchor in {linked.relative_to(root)}")
                    broken += 1
    print(f"links: {broken} broken in {len(pages)} pages")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())

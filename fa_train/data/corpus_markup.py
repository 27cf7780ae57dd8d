"""Markup to plain text, the same rules for every source of a kind: reST (Sphinx and kernel docs),
POD (Perl) and HTML. Prose and code samples are kept; directives, tags and link targets are not.
`clean_text` then normalizes whitespace, and `drop_boilerplate` removes lines that repeat across
most documents of a source (navigation, footers).
"""
from __future__ import annotations

import html
import re
from collections import Counter
from html.parser import HTMLParser

EOT_LITERAL = "<|endoftext|>"  # the document separator of GPT-2 style token streams, never inside a document

# ----------------------------------------------------------------------------- reST
_RST_DROP_BLOCKS = {"toctree", "image", "figure", "include", "literalinclude", "index", "highlight", "raw",
                    "kernel-doc", "kernel-abi", "kernel-feat", "contents", "sectionauthor", "moduleauthor",
                    "tabularcolumns", "only", "autosummary", "automodule", "autoclass", "autofunction",
                    "currentmodule", "module", "testsetup", "testcleanup", "ipython", "plot", "graphviz",
                    "csv-table", "meta", "c:namespace", "default-role", "role", "spelling:word-list"}
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:.-]+)::\s*(.*)$")
_COMMENT = re.compile(r"^(\s*)\.\.(\s.*)?$")
_UNDERLINE = re.compile(r"^\s*([=\-~^\"'`#*+_:.<>])\1{2,}\s*$")
_TABLE_RULE = re.compile(r"^\s*\+[-=+]*\+\s*$|^\s*=+( +=+)+\s*$")  # grid and simple table borders
_FIELD = re.compile(r"^\s*:[\w -]+:(\s.*)?$")
_INLINE = r"(?:[^`\n]|\n(?![ \t]*\n))"  # inside backquotes: any text but a backquote or a blank line
_ROLE = re.compile(rf":[\w:.+-]+:`({_INLINE}*)`")
_LINK = re.compile(rf"`({_INLINE}*?)\s*<[^`>]*>`_{{1,2}}")
_REF = re.compile(rf"`({_INLINE}+)`_{{1,2}}")
_LITERAL = re.compile(rf"``({_INLINE}+?)``")
_EMPH = re.compile(r"(?<![\w*])\*{1,2}([^*\s][^*\n]*?)\*{1,2}(?![\w*])")
_TITLE_REF = re.compile(rf"(?<![\w`])`({_INLINE}+)`(?![\w`])")
_SUBST = re.compile(r"\|(\w[\w -]*)\|_?")
_FOOTNOTE = re.compile(r"\s?\[(#|\*|\d+|#\w+)\]_")


def _role_text(m: re.Match) -> str:
    inner = m.group(1)
    label = re.match(r"^(.*?)\s*<[^<>]*>$", inner, re.S)  # :ref:`text <target>` -> text
    return (label.group(1) if label else inner).lstrip("~!")


def rst_inline(text: str) -> str:
    """Inline reST markup -> its text (roles, links, literals, emphasis may span lines, not paragraphs)."""
    text = _ROLE.sub(_role_text, text)
    text = _LINK.sub(lambda m: m.group(1), text)
    text = _LITERAL.sub(lambda m: m.group(1), text)
    text = _REF.sub(lambda m: m.group(1), text)
    text = _TITLE_REF.sub(lambda m: m.group(1), text)
    text = _EMPH.sub(lambda m: m.group(1), text)
    text = _FOOTNOTE.sub("", text)
    return _SUBST.sub(lambda m: m.group(1), text)


def rst_to_text(text: str) -> str:
    """reST -> text: section underlines, comments, field lists of directives and whole blocks of
    non-prose directives (toctree, image, index, ...) go; other directives keep their body and title
    argument; inline roles, links and emphasis keep their text."""
    out: list[str] = []
    skip_indent: int | None = None  # dropping an indented block deeper than this
    after_directive = False
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if not line.strip() or indent > skip_indent:
                continue
            skip_indent = None
        if after_directive and _FIELD.match(line):  # the options right under a directive
            continue
        after_directive = False
        if m := _DIRECTIVE.match(line):
            name = m.group(2).lower()
            if name in _RST_DROP_BLOCKS or name.startswith(("auto", "c:", "py:module")):
                skip_indent = len(m.group(1))
            else:
                after_directive = True
                if m.group(3) and not name.startswith(("code", "highlight", "literal")):
                    out.append(m.group(1) + m.group(3))
            continue
        if _COMMENT.match(line):  # a comment, a link target or a substitution definition: its block goes
            skip_indent = indent
            continue
        if _UNDERLINE.match(line) or _TABLE_RULE.match(line):
            continue
        line = re.sub(r"\s*::$", "", line) if line.strip() == "::" else re.sub(r"::$", ":", line.rstrip())
        out.append(line)
    return rst_inline("\n".join(out))


# ----------------------------------------------------------------------------- POD
_POD_CMD = re.compile(r"^=(\w+)\s*(.*)$")
_POD_CODE = re.compile(r"([A-Z])(<{2,})\s(.*?)\s(>{2,})|([A-Z])<([^<>]*)>")
_POD_KEEP = {"head1", "head2", "head3", "head4", "item"}


def _pod_inline(s: str) -> str:
    """Resolve POD formatting codes (B<..>, C<< .. >>, L<text|target>, E<lt>, ...) innermost first."""
    def one(m: re.Match) -> str:
        if m.group(1):
            if len(m.group(4)) < len(m.group(2)):
                return m.group(0)
            code, body = m.group(1), m.group(3) + m.group(4)[len(m.group(2)):]
        else:
            code, body = m.group(5), m.group(6)
        if code == "E":
            return {"lt": "<", "gt": ">", "verbar": "|", "sol": "/"}.get(body, html.unescape(f"&{body};")
                                                                          if not body.isdigit() else chr(int(body)))
        if code in "XZ":
            return ""
        if code == "L":
            text, sep, target = body.partition("|")
            if sep:
                return text
            return body.split("/", 1)[-1].strip('"') if "/" in body and "://" not in body else body
        return body

    for _ in range(8):  # nested codes: each pass resolves the innermost ones
        new = _POD_CODE.sub(one, s)
        if new == s:
            break
        s = new
    return s


def pod_to_text(text: str) -> str:
    """POD -> text: ``=head``/``=item`` lines keep their text; other commands (``=over``, ``=cut``,
    ``=begin``..``=end`` blocks, ``=for``) go; formatting codes keep their text."""
    out: list[str] = []
    in_pod, skip_until = text.lstrip().startswith("="), None
    for line in text.splitlines():
        m = _POD_CMD.match(line)
        if skip_until is not None:
            if m and m.group(1) == "end":
                skip_until = None
            continue
        if m:
            cmd, arg = m.group(1), m.group(2)
            in_pod = cmd != "cut"
            if cmd == "begin":
                skip_until = "end"
            elif cmd in _POD_KEEP and arg.strip():
                out.append(_pod_inline(arg.strip()))
            continue
        if in_pod:
            out.append(line.rstrip() if line[:1].isspace() else _pod_inline(line.rstrip()))
    return "\n".join(out)


# ----------------------------------------------------------------------------- HTML
_BLOCK_TAGS = {"p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "tr", "table", "h1", "h2", "h3", "h4",
               "h5", "h6", "pre", "blockquote", "section", "article", "hr", "td", "th", "caption", "figure"}
_VOID_TAGS = {"br", "hr", "img", "input", "meta", "link", "wbr", "col", "area", "base", "source"}
_SKIP_TAGS = {"head", "script", "style", "nav", "footer", "header", "noscript", "svg", "form", "button"}
_SKIP_ROLES = {"navigation", "search", "contentinfo", "banner"}
_SKIP_CLASSES = {"headerlink", "related", "sphinxsidebar", "breadcrumbs", "footer", "navigation", "navheader",
                 "navfooter", "toc", "sidebar", "searchbox", "copiable-anchor", "permalink"}
_HTML_LANG = re.compile(r"<html\b[^>]*?\blang=[\"']?([\w-]+)", re.IGNORECASE)


def _skipped(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    """Navigation and page furniture: by tag, ARIA role or class (Sphinx, DocBook, rustdoc themes)."""
    if tag in _SKIP_TAGS:
        return True
    a = {k: v or "" for k, v in attrs}
    return a.get("role", "") in _SKIP_ROLES or bool(_SKIP_CLASSES & set(a.get("class", "").split()))


class _HTMLText(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping: list[list] = []  # [tag, depth] of the skipped element we are inside
        self.pre = 0

    def handle_starttag(self, tag, attrs):
        if self.skipping:
            if tag == self.skipping[-1][0]:
                self.skipping[-1][1] += 1
            return
        if tag not in _VOID_TAGS and _skipped(tag, attrs):
            self.skipping.append([tag, 1])
            return
        if tag == "pre":
            self.pre += 1
        if tag in _BLOCK_TAGS:
            self.parts.append("\n\n" if tag in ("p", "pre", "h1", "h2", "h3", "h4", "table") else "\n")

    def handle_endtag(self, tag):
        if self.skipping:
            if tag == self.skipping[-1][0]:
                self.skipping[-1][1] -= 1
                if self.skipping[-1][1] == 0:
                    self.skipping.pop()
            return
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append(" ")

    def handle_data(self, data):
        if not self.skipping:
            self.parts.append(data if self.pre else re.sub(r"\s+", " ", data))


def html_to_text(text: str) -> str:
    """HTML -> text: the visible text of the body (head, scripts, styles and navigation dropped: see
    `_skipped`), block elements on their own lines, ``<pre>`` kept verbatim, entities decoded."""
    parser = _HTMLText()
    parser.feed(text)
    parser.close()
    return "".join(parser.parts)


def html_language(page: str) -> str:
    """The language a page declares on its ``<html lang=...>`` element, lowercased ('' when none)."""
    m = _HTML_LANG.search(page[:4096])
    return m.group(1).lower() if m else ""


# ----------------------------------------------------------------------------- normalization
def clean_text(text: str) -> str:
    """Normalize a document: no GPT-2 separator literal, no control characters, no trailing spaces,
    at most one blank line in a row, no leading/trailing blank lines."""
    text = text.replace(EOT_LITERAL, "").replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ")
    text = re.sub(r"[\x00-\x08\x0b-\x1f\x7f\ufeff]", "", text)
    lines = [line.rstrip() for line in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n")


def drop_boilerplate(texts: list[str], min_docs: int = 20, fraction: float = 0.3) -> list[str]:
    """Remove from each text the lines (stripped, non-empty) that appear in at least ``fraction`` of
    the texts, when there are at least ``min_docs`` texts (site navigation, copyright footers)."""
    if len(texts) < min_docs:
        return texts
    counts = Counter(line for t in texts for line in {s.strip() for s in t.split("\n")} if line)
    common = {line for line, c in counts.items() if c >= fraction * len(texts)}
    if not common:
        return texts
    return [clean_text("\n".join(s for s in t.split("\n") if s.strip() not in common)) for t in texts]

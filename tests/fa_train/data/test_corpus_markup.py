"""Markup to text: reST, POD, HTML, normalization and boilerplate removal."""
from __future__ import annotations

from fa_train.data.corpus_markup import (clean_text, drop_boilerplate, html_language, html_to_text, pod_to_text,
                                         rst_to_text)

RST = """.. _tut:

Title here
==========

.. toctree::
   :maxdepth: 2

   intro

.. note::
   :class: x

   Use :func:`len`, ``code``, `Python <https://python.org>`_, *em* and **strong**.

.. function:: open(file, mode='r')

   Open *file*; see :ref:`the tutorial <tut>` and |version| [#]_, or :ref:`the long
   section name <long>` and ``a
   literal``.

+-----+-----+
| a   | b   |
+=====+=====+

Example::

    >>> print(1)
"""


def test_rst_keeps_prose_and_code_and_drops_markup():
    text = rst_to_text(RST)
    assert "Title here" in text and "=====" not in text
    assert "toctree" not in text and "maxdepth" not in text and "intro" not in text and ":class:" not in text
    assert "Use len, code, Python, em and strong." in text
    assert "open(file, mode='r')" in text and "see the tutorial and version, or the long\n   section name and a\n" in text
    assert "   literal." in text
    assert "Example:\n" in text and ">>> print(1)" in text and "+-----+" not in text and "| a   | b   |" in text
    assert ".. " not in text and "_tut" not in text


POD = """=head1 NAME

perlfunc - B<builtin> C<< $x->{a} >> see L<perlop/Operators>, L<the docs|perlsyn>, 1 E<lt> 2

    my $code = 1;

=over 4

=item X<foo>foo EXPR

Does I<stuff>.

=back

=begin html

<b>hidden</b>

=end html

=cut

sub not_pod {}
"""


def test_pod_keeps_headings_items_text_and_verbatim():
    text = pod_to_text(POD)
    assert text.splitlines()[0] == "NAME"
    assert "perlfunc - builtin $x->{a} see Operators, the docs, 1 < 2" in text
    assert "    my $code = 1;" in text and "foo EXPR" in text and "Does stuff." in text
    assert "=over" not in text and "hidden" not in text and "not_pod" not in text


def test_html_keeps_visible_text_and_pre():
    page = ("<html><head><title>T</title><style>p{}</style></head><body><nav>Home | Next</nav>"
            "<div class='related' role='navigation'><div><a>Up</a></div> &raquo;</div>"
            "<h1>Heading<a class='headerlink' href='#h'>\u00b6</a><a class='copiable-anchor'>\u00b6</a></h1>"
            "<h2>Sub<a class='permalink' title='Permanent link'>&para;</a></h2><br>"
            "<p>Some   <b>bold</b>\n text &amp; more.</p><pre>  x = 1\n  y = 2</pre>"
            "<script>var a;</script><ul><li>one</li><li>two</li></ul></body></html>")
    text = clean_text(html_to_text(page))
    assert text.startswith("Heading") and "Some bold text & more." in text
    assert "  x = 1\n  y = 2" in text and "one\n" in text and "two" in text
    assert "Home" not in text and "Up" not in text and "\u00b6" not in text and "\u00bb" not in text
    assert "var a" not in text and "p{}" not in text and "T\n" not in text


def test_html_language_reads_the_html_element():
    assert html_language('<!DOCTYPE html>\n<html lang="pt-BR"><head>') == "pt-br"
    assert html_language("<html xmlns='x' lang=en>") == "en" and html_language("<p>no html element</p>") == ""


def test_clean_text_normalizes_whitespace_and_removes_the_separator():
    assert clean_text("\n\na  \r\nb<|endoftext|>\x00\n\n\n\n\tc\n\n") == "a\nb\n\n    c"


def test_drop_boilerplate_removes_lines_repeated_across_documents():
    texts = [f"Doc {i} body line.\nCopyright 2024 the team." for i in range(30)]
    texts[0] += "\nunique"
    out = drop_boilerplate(texts)
    assert out[0] == "Doc 0 body line.\nunique" and all("Copyright" not in t for t in out)
    assert drop_boilerplate(texts[:5]) == texts[:5]  # too few documents to tell boilerplate

"""The rank-filterable output widget of ``%%alchemist_px`` cells, without a browser.

The widget's model is driven as :meth:`Session.run` drives it (``show`` many times, then
``close``), in a real IPython shell whose display messages are captured; the text it
sends to the browser is read back from the HTML widget's value. The same widget in a
real JupyterLab is ``tests/interactive/test_session_output.py``.
"""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from IPython.utils.capture import capture_output

from alchemist.interactive import output
from alchemist.widgets.rank_output import RankOutput

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def shown(ro: RankOutput) -> list[str]:
    """The lines the browser shows now (the HTML widget's ``<pre>``, unescaped)."""
    area = ro.widget.children[1]
    match = re.search(r"<pre[^>]*>(.*)</pre>", area.value, re.DOTALL)
    assert match, area.value
    text = html.unescape(match.group(1))
    return text.split("\n") if text else []


def buttons(ro: RankOutput) -> Any:
    return ro.widget.children[0]


def test_lines_show_in_order_per_rank_with_a_prefix(ip: Any) -> None:
    ro = RankOutput([0, 1], interval=0)
    with capture_output():
        ro.show([(0, "a0"), (0, "a1"), (1, "b0")])
        ro.show([(1, "b1"), (0, "a2")])
        ro.show([])
        ro.close()
    assert shown(ro) == [
        "[rank 0] a0", "[rank 0] a1", "[rank 1] b0", "[rank 1] b1", "[rank 0] a2",
    ]  # fmt: skip
    assert [label for label, _ in buttons(ro).options] == ["all ranks", "rank 0", "rank 1"]


def test_the_filter_shows_one_rank_and_follows_its_new_lines(ip: Any) -> None:
    ro = RankOutput([0, 1, 3], interval=0)
    with capture_output():
        ro.show([(0, "a0"), (1, "b0"), (3, "d0"), (1, "b1")])
        buttons(ro).value = 1  # what clicking "rank 1" sends from the browser
        assert shown(ro) == ["[rank 1] b0", "[rank 1] b1"]
        ro.show([(0, "a1"), (1, "b2")])
        assert shown(ro) == ["[rank 1] b0", "[rank 1] b1", "[rank 1] b2"]
        ro.close()
    buttons(ro).value = 3  # after the cell: the kernel answers the idle filter
    assert shown(ro) == ["[rank 3] d0"]
    ro.select(None)
    assert shown(ro) == [
        "[rank 0] a0", "[rank 1] b0", "[rank 3] d0", "[rank 1] b1", "[rank 0] a1", "[rank 1] b2",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="rank 2 is not one of this cell's ranks"):
        ro.select(2)


def test_memory_and_messages_are_bounded(ip: Any) -> None:
    ro = RankOutput([0, 1], max_lines=10, max_line_chars=50, interval=0, session_id="s1")
    with capture_output():
        for i in range(1000):
            ro.show([(0, f"zero {i}"), (1, f"one {i}")])
        ro.show([(1, "x" * 10_000)])
        ro.close()
    assert len(ro.lines()) == 10 and len(ro.lines(0)) == 10 and len(ro.lines(1)) == 10
    assert ro.lines(0)[-1] == "[rank 0] zero 999"
    assert shown(ro)[-1] == "[rank 1] " + "x" * 50 + "… (9950 more characters)"
    assert shown(ro)[0] == "[rank 1] one 995"  # the last 10 lines of both ranks
    assert len(buttons(ro).options) == 3
    note = ro.widget.children[2].value
    assert "1991 earlier lines not shown (the last 10 are kept)" in note
    assert "alchemist logs s1 --rank R" in note
    assert len(ro.widget.children[1].value) < 2000
    buttons(ro).value = 0
    assert "990 earlier lines" in ro.widget.children[2].value
    assert "alchemist logs s1 --rank 0" in ro.widget.children[2].value


def test_updates_are_throttled_with_a_final_one_on_close(ip: Any) -> None:
    ro = RankOutput([0, 1], interval=3600)
    sent: list[str] = []
    with capture_output():
        ro.show([(0, "first")])  # the first line displays the widget at once
        ro.widget.children[1].observe(lambda change: sent.append(change["new"]), names="value")
        for i in range(200):
            ro.show([(i % 2, f"line {i}")])
        assert shown(ro) == ["[rank 0] first"] and sent == []  # no update in an hour
        ro.close()
    assert len(sent) == 1 and shown(ro)[-1] == "[rank 1] line 199"
    assert len(shown(ro)) == 201


def test_close_updates_the_display_with_the_text_of_every_rank(ip: Any) -> None:
    ro = RankOutput([0, 1], interval=0, max_lines=3, session_id="s9")
    with capture_output() as captured:
        ro.show([(0, "hello"), (1, "world")])
        ro.show([(0, "\x1b[31mred\x1b[0m"), (1, "10%\r50%\r100%")])
        ro.close()
        ro.close()  # idempotent: one final update
    first, *rest = captured.outputs
    assert len(rest) == 1
    final = rest[0]
    display_id = first.transient["display_id"]
    assert display_id and final.update and final.transient["display_id"] == display_id
    assert WIDGET_VIEW in first.data and WIDGET_VIEW in final.data
    assert final.data[WIDGET_VIEW]["model_id"] == ro.widget.model_id
    assert final.data["text/plain"] == (
        "[1 earlier line not shown (the last 3 are kept); every line: alchemist logs s9"
        " --rank R]\n[rank 1] world\n[rank 0] \x1b[31mred\x1b[0m\n[rank 1] 100%"
    )
    # the HTML view drops the colour codes and shows what a terminal shows of a \r line
    assert shown(ro) == ["[rank 1] world", "[rank 0] red", "[rank 1] 100%"]


def test_a_cell_without_output_displays_nothing(ip: Any) -> None:
    ro = RankOutput([0, 1])
    with capture_output() as captured:
        ro.show([])
        ro.close()
    assert captured.outputs == []


def test_the_widget_is_the_view_in_a_notebook_only(
    ip: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(output.view([0, 1]), output.TextView)  # a terminal IPython
    monkeypatch.setattr(output, "_notebook", lambda: True)
    monkeypatch.delenv(output.TEXT_ENV, raising=False)
    ro = output.view([0, 1], session_id="s5")
    assert isinstance(ro, RankOutput) and ro.ranks == [0, 1] and ro.session_id == "s5"
    monkeypatch.setenv(output.TEXT_ENV, "1")
    assert isinstance(output.view([0, 1]), output.TextView)

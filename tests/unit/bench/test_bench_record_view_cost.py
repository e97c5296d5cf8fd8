"""bench.record_view_cost runs, and its two converter paths build the same messages.

Its copy of the converters from before MessageRecord must answer exactly what the proxy's
converters answer from the view (the script checks this before it times anything), or the
comparison it prints would time different work. No timing is asserted.
"""

from __future__ import annotations

from bench import record_view_cost


def test_the_script_prints_its_table_after_checking_both_paths_agree() -> None:
    table = record_view_cost.main(number=3, repeat=1)
    assert "| v1 ReceivedMessage (convert.fill_received_message) |" in table
    assert "| v2 Message (rocketmq convert.v2_message) |" in table
    assert "v2: view vs old converter on the proto" in table

import io

from harness.history import Client, HistoryWriter
from harness.run.progress import ProgressLine


def test_progress_counts_completions_as_they_are_flushed(tmp_path) -> None:
    out = io.StringIO()
    progress = ProgressLine(tmp_path, out=out)
    writer = HistoryWriter(tmp_path / "w.jsonl", flush_every=1)
    client = Client(writer, worker="w", user=0)
    client.invoke("pay").ok(status=200)
    client.invoke("pay").fail(status=409)
    progress.update(active_faults=["latency_downstream"])
    assert progress.counts == {"ok": 1, "fail": 1, "info": 0}
    client.invoke("pay").info(error="timeout")
    progress.finish()
    writer.close()
    assert progress.counts == {"ok": 1, "fail": 1, "info": 1}
    assert "latency_downstream" in out.getvalue()
    assert out.getvalue().rstrip().endswith("faults: none")
    assert "operations 3" in out.getvalue()

"""Coverage layer against a real deployment: the records of this start, from the
server's log (--server-log), its journal (--journal-unit, --since) or the plugin's
status directory (--status-dir), judged for --tp-size ranks (default: tp_size from the
server's /server_info when --endpoint is an SGLang server) and --expect-hooks. Also part
of the live layer (``-m live``): per-rank coverage of the server the live tests judge."""

import pytest

from kdgate.coverage import check_coverage
from kdgate.record_sources import read_journal, read_log_file, read_status_dir

pytestmark = [pytest.mark.coverage, pytest.mark.live]


def test_deployment_coverage(gate_options, gate_notes, gate_data):
    opts = gate_options
    if not opts.has_coverage_source:
        pytest.skip("not run: no coverage source given (--server-log, --journal-unit or "
                    "--status-dir)")
    tp_size = opts.tp_size
    if tp_size is None and opts.endpoint:
        from kdgate.live_client import LiveClient

        client = LiveClient(opts.endpoint, opts.api_key, timeout_s=60)
        if client.flavor() == "sglang":
            tp_size = client.server_info().get("tp_size")
    if tp_size is None:
        pytest.fail("--tp-size N is required to judge a deployment's coverage (the server "
                    "does not report tp_size)")
    if opts.server_log:
        records, unreadable = read_log_file(opts.server_log)
        source = opts.server_log
    elif opts.journal_unit:
        records, unreadable = read_journal(opts.journal_unit, opts.since)
        source = f"journal:{opts.journal_unit}"
    else:
        records, unreadable = read_status_dir(opts.status_dir)
        source = opts.status_dir
    verdict = check_coverage(records, int(tp_size), opts.expect_hooks, source, unreadable)
    gate_notes.append(verdict.summary())
    gate_data.append({"kind": "coverage-grid", "label": f"deployment ({source})", **verdict.figures()})
    assert verdict.passed, verdict.summary()

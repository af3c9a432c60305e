"""Coverage layer against a real deployment: the records of this start, from the
server's log (--server-log), its journal (--journal-unit, --since) or the plugin's
status directory (--status-dir), judged for --tp-size ranks and --expect-hooks."""

import pytest

from kdgate.coverage import check_coverage
from kdgate.record_sources import read_journal, read_log_file, read_status_dir

pytestmark = pytest.mark.coverage


def test_deployment_coverage(gate_options, gate_notes):
    opts = gate_options
    if not opts.has_coverage_source:
        pytest.skip("not run: no coverage source given (--server-log, --journal-unit or "
                    "--status-dir)")
    if opts.tp_size is None:
        pytest.fail("--tp-size N is required to judge a deployment's coverage")
    if opts.server_log:
        records, unreadable = read_log_file(opts.server_log)
        source = opts.server_log
    elif opts.journal_unit:
        records, unreadable = read_journal(opts.journal_unit, opts.since)
        source = f"journal:{opts.journal_unit}"
    else:
        records, unreadable = read_status_dir(opts.status_dir)
        source = opts.status_dir
    verdict = check_coverage(records, opts.tp_size, opts.expect_hooks, source, unreadable)
    gate_notes.append(verdict.summary())
    assert verdict.passed, verdict.summary()

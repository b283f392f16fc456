#!/bin/bash
# ci/slow.sh - the tests at the size their issues name, too slow to run on
# every change: the fan-out crash test (test/t/047_fan_out_crash.pl) with
# 10,000 events to three webhooks and a NOTIFY channel, the relay killed
# mid-flow (the suite uses 2,000). Against the installed build, as
# ci/check.sh runs it: after ci/test-all.sh, or a build and `make install`
# into the PostgreSQL that PG_CONFIG names. About a minute on 2 cores
# (the suite's 2,000 take 15 s, and the suite runs five times in CI).
#
# Environment: OUTBOX_FAN_OUT_EVENTS (10000), and those of ci/check.sh.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUTBOX_FAN_OUT_EVENTS=${OUTBOX_FAN_OUT_EVENTS:-10000} \
    PROVE_TESTS=test/t/047_fan_out_crash.pl exec bash ci/check.sh

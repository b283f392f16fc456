#!/bin/bash
# ci/slow.sh - the tests at the size their issues name, too slow to run on
# every change: the fan-out crash test (test/t/047_fan_out_crash.pl) with
# 10,000 events to three webhooks and a NOTIFY channel, the relay killed
# mid-flow, the BullMQ test (test/t/110_bullmq.pl) with 10,000 events
# into one queue through five kills of the relay and an immediate stop
# (the suite uses 2,000 for each), and the RabbitMQ faults test
# (test/t/121_rabbitmq_faults.pl) with 10,000 events into a durable queue
# through a kill of the relay (3,000 in the suite), and the Kafka faults
# test (test/t/131_kafka_faults.pl) with 10,000 events into librdkafka's
# mock cluster through a kill of the relay (3,000 in the suite). Against the installed build, as
# ci/check.sh runs it: after ci/test-all.sh, or a build and `make install`
# into the PostgreSQL that PG_CONFIG names. About two minutes on 2 cores
# (the suite's 2,000 take 15 s each, and the suite runs five times in CI).
#
# Environment: OUTBOX_FAN_OUT_EVENTS, OUTBOX_BULLMQ_EVENTS,
# OUTBOX_RABBITMQ_EVENTS and OUTBOX_KAFKA_EVENTS (10000 each), and those
# of ci/check.sh.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUTBOX_FAN_OUT_EVENTS=${OUTBOX_FAN_OUT_EVENTS:-10000} \
    OUTBOX_BULLMQ_EVENTS=${OUTBOX_BULLMQ_EVENTS:-10000} \
    OUTBOX_RABBITMQ_EVENTS=${OUTBOX_RABBITMQ_EVENTS:-10000} \
    OUTBOX_KAFKA_EVENTS=${OUTBOX_KAFKA_EVENTS:-10000} \
    PROVE_TESTS="test/t/047_fan_out_crash.pl test/t/110_bullmq.pl test/t/121_rabbitmq_faults.pl test/t/131_kafka_faults.pl" exec bash ci/check.sh

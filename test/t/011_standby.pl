# A streaming standby has no outbox workers while in recovery: events
# emitted on the primary are delivered by the primary's relay alone, and
# their delivery replicates. Once the primary is stopped and the standby
# promoted, a relay and its launcher start there and deliver the events
# emitted on it and the one left pending at the failover.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Retries stay short and never dead-letter while an event waits for the
# failover.
my $node = outbox_node(
	'primary',
	allows_streaming => 1,
	'outbox.max_attempts' => 1000,
	'outbox.backoff_max' => "'1s'");
my $sink = start_sink();
my $url = $sink->url('/hook');
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hooks', '*', '$url')});
ok(wait_relay($node, 'postgres'), 'relay runs in database postgres');

$node->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'bk', has_streaming => 1);
$standby->start;
$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'standby in recovery');

my $workers = "SELECT count(*) FROM pg_stat_activity WHERE backend_type IN ('outbox relay', 'outbox launcher')";
is($standby->safe_psql('postgres', $workers), '0', 'no outbox worker on the standby');

$sink->reset;
my $on_primary = emit($node, 'postgres', 'standby.primary', 3);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM outbox WHERE event_type = 'standby.primary' AND delivered_at IS NOT NULL"),
	'primary delivers its events');
$node->wait_for_catchup($standby);
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM outbox WHERE event_type = 'standby.primary' AND delivered_at IS NOT NULL"),
	'3', 'the events and their delivery replicated');
is_deeply([ sort map { $_->{webhook_id} } @{ $sink->requests } ], [ sort @$on_primary ],
	'one request per event: only the primary delivered');
is($standby->safe_psql('postgres', $workers), '0', 'still no outbox worker on the standby');

# an event left pending at the failover
$sink->control(status => 503);
my ($left_id) = @{ emit($node, 'postgres', 'standby.left', 1) };
ok( $node->poll_query_until('postgres',
		"SELECT attempts >= 1 AND delivered_at IS NULL FROM outbox WHERE event_id = '$left_id'"),
	'an event pending on the primary');
$node->wait_for_catchup($standby);
$node->stop;
unlike(slurp_file($standby->logfile), qr/outbox relay started/, 'no relay ever started on the standby');

$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'), 'standby promoted');
ok(wait_relay($standby, 'postgres'), 'a relay starts on the new primary');
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox launcher'"),
	'1', 'with its launcher');
$sink->reset;
my $on_new = emit($standby, 'postgres', 'standby.promoted', 3);
ok( $standby->poll_query_until('postgres',
		"SELECT count(*) = 4 FROM outbox WHERE event_type IN ('standby.promoted', 'standby.left') AND delivered_at IS NOT NULL"),
	'the new primary delivers events emitted there and the one left pending');
is_deeply($sink->delivered_ids, [ sort(@$on_new, $left_id) ], 'the sink received each of them once');

$standby->stop;
$sink->stop;
done_testing();

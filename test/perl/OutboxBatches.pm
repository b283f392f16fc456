# What the tests of webhooks in batches (039_batches_requests.pl,
# 039_batches_outcomes.pl) share: a node with five batching destinations on
# the webhook sink, and a backlog of events queued while the relay was
# stopped, then delivered.
package OutboxBatches;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use OutboxTest;
use Test::More;

our @EXPORT = qw(batches_node backlog requests_of);

# The secret of destination env.
our $secret = 'batch secret';

# A started node called $name and the sink, with the relay running (a
# test) and these destinations, each on its own path of the sink:
#   env    env.*    10 per request, signed with $OutboxBatches::secret
#   ce     ce.*     5 per request, CloudEvents (source /shop)
#   ord    ord.*    100 per request, ordered
#   fail   fail.*   4 per request
#   crash  crash.*  10 per request
# Returns ($node, $sink).
sub batches_node
{
	my ($name) = @_;
	# the framework turns restart_after_crash off; a relay killed by a signal
	# must bring the server through a crash restart, as in production
	my $node = outbox_node($name, restart_after_crash => 'on');
	my $sink = start_sink();
	ok(wait_relay($node, 'postgres'), 'relay runs');
	$node->safe_psql('postgres', sprintf(q{
		INSERT INTO outbox_destinations (name, event_types, url, secret, events_per_request) VALUES
			('env', 'env.*', '%s', '%s', 10);
		INSERT INTO outbox_destinations (name, event_types, url, format, cloudevents_source, events_per_request) VALUES
			('ce', 'ce.*', '%s', 'cloudevents', '/shop', 5);
		INSERT INTO outbox_destinations (name, event_types, url, events_per_request, ordered) VALUES
			('ord', 'ord.*', '%s', 100, true);
		INSERT INTO outbox_destinations (name, event_types, url, events_per_request) VALUES
			('fail', 'fail.*', '%s', 4), ('crash', 'crash.*', '%s', 10);},
		$sink->url('/env'), $secret, $sink->url('/ce'), $sink->url('/ord'), $sink->url('/fail'),
		$sink->url('/crash')));
	return ($node, $sink);
}

# Stops the relay of $node, runs $emit (SQL), starts the relay and waits
# until every event of $like is delivered (two tests); returns the ids
# emitted, in id order.
sub backlog
{
	my ($node, $like, $emit) = @_;
	set_databases($node, '');
	ok(wait_no_relay($node, 'postgres'), "$like: relay stopped");
	$node->safe_psql('postgres', $emit);
	set_databases($node, 'postgres');
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 0 FROM outbox WHERE event_type LIKE '$like' AND delivered_at IS NULL"),
		"$like: every event delivered");
	return [ split /\n/,
		$node->safe_psql('postgres', "SELECT event_id FROM outbox WHERE event_type LIKE '$like' ORDER BY id") ];
}

# The requests $sink answered for $path, in arrival order.
sub requests_of
{
	my ($sink, $path) = @_;
	return [ sort { $a->{received_at} <=> $b->{received_at} } @{ $sink->requests($path) } ];
}

1;

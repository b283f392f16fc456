# What the tests of ordered destinations (080_ordered_delivery.pl,
# 082_ordered_blockers.pl) share: a node with four relays and three
# destinations on the webhook sink, and the check of the order in which
# the sink saw the events of one key.
package OutboxOrdered;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use OutboxTest;
use Test::More;

our @EXPORT = qw(ordered_node check_order);

# The relays per database.
our $relays = 4;

# A started node called $name with $OutboxOrdered::relays relays in
# database postgres (a test waits for them), and the sink, with these
# destinations, each on its own path of the sink:
#   ord   ord.*   ordered
#   pz    pz.*    ordered
#   flat  flat.*  not ordered
# Returns ($node, $sink).
sub ordered_node
{
	my ($name) = @_;
	# the framework turns restart_after_crash off; a test kills a relay
	# requests the endpoint holds stay in flight until it lets them go, however
	# slow the run (with the default 5 s limit they would be retried meanwhile)
	my $node = outbox_node($name, 'outbox.relays_per_database' => $relays,
		'outbox.http_timeout' => "'180s'", restart_after_crash => 'on');
	my $sink = start_sink();
	ok( $node->poll_query_until('postgres', qq{
			SELECT count(*) = $relays FROM pg_stat_activity
			 WHERE backend_type = 'outbox relay' AND datname = 'postgres'}),
		"$relays relays run");

	$node->safe_psql('postgres', sprintf(q{
		INSERT INTO outbox_destinations (name, event_types, url, ordered) VALUES
		    ('ord', 'ord.*', '%s', true),
		    ('pz', 'pz.*', '%s', true),
		    ('flat', 'flat.*', '%s', false)},
		$sink->url('/ord'), $sink->url('/pz'), $sink->url('/flat')));
	return ($node, $sink);
}

# Checks the order of the events of type $type on $node at path $path of
# $sink (two tests, named after $what); returns the number of distinct
# events that arrived there with a 2xx answer.
#
# Per key, the first arrival of each event (duplicates removed by
# webhook-id) must be in strictly increasing id order, and come after the
# 2xx answer to the event before it, or its last answer if it never had
# one (a skipped dead event): never two of a key in flight at once.
sub check_order
{
	my ($node, $sink, $path, $type, $what) = @_;
	my %event;
	for my $row (split /\n/, $node->safe_psql('postgres',
		"SELECT event_id, id, coalesce(aggregate_type, '') || '/' || aggregate_id FROM outbox WHERE event_type = '$type'"))
	{
		my ($event_id, $id, $key) = split /\|/, $row;
		$event{$event_id} = { id => $id, key => $key };
	}
	# an event is done at its first 2xx answer or, if it never had one
	# (dead-lettered, then skipped), at its last answer
	my (%first, %ok_at, %done_at, %by_key);
	for my $r (sort { $a->{received_at} <=> $b->{received_at} } @{ $sink->arrivals($path) })
	{
		my $e = $event{ $r->{webhook_id} } or next;
		$ok_at{ $r->{webhook_id} } //= $r->{answered_at}
		  if defined $r->{status} && $r->{status} >= 200 && $r->{status} < 300;
		$done_at{ $r->{webhook_id} } = $ok_at{ $r->{webhook_id} } // $r->{answered_at};
		next if $first{ $r->{webhook_id} }++;
		push @{ $by_key{ $e->{key} } }, [ $e->{id}, $r->{received_at}, $r->{webhook_id} ];
	}
	my ($out_of_order, $overlap) = (0, 0);
	for my $key (sort keys %by_key)
	{
		my $seq = $by_key{$key};
		for my $i (1 .. $#$seq)
		{
			my ($prev, $cur) = ($seq->[ $i - 1 ], $seq->[$i]);
			if ($cur->[0] <= $prev->[0])
			{
				diag("$what: key $key: event $cur->[0] arrived after $prev->[0]") unless $out_of_order++;
			}
			my $prev_done = $done_at{ $prev->[2] };
			if (!defined $prev_done || $cur->[1] <= $prev_done)
			{
				diag("$what: key $key: event $cur->[0] arrived before $prev->[0] was done")
				  unless $overlap++;
			}
		}
	}
	is($out_of_order, 0, "$what: per key, events first arrive in increasing id order");
	is($overlap, 0, "$what: per key, each arrives only after the one before was answered");
	return scalar keys %ok_at;
}

1;

# What the tests of JetStream destinations when things fail
# (091_jetstream_faults.pl, 091_jetstream_errors_and_sigterm.pl) share: a
# nats-server with four streams, a node whose relay may be killed, three
# destinations, and the check that a stream holds exactly one message per
# event.
package OutboxJetStreamFaults;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use OutboxNats;
use OutboxTest;
use Test::More;

our @EXPORT = qw(jetstream_faults_setup exactly_once);

# Starts a nats-server with streams FLOW (flow.>), OUTAGE (outage.>),
# FROZEN (frozen.>) and DUP (dup.>), and a node (batch size 200,
# outbox.jetstream_timeout 2 s) with these destinations on it:
#   flow    flow.*    subject {event_type}, stream FLOW
#   outage  outage.*  subject {event_type}, stream OUTAGE
#   frozen  frozen.*  subject {event_type}, stream FROZEN
# Returns ($nats, $node).
sub jetstream_faults_setup
{
	my $nats = start_nats();
	$nats->add_stream('FLOW', 'flow.>');
	$nats->add_stream('OUTAGE', 'outage.>');
	$nats->add_stream('FROZEN', 'frozen.>');
	$nats->add_stream('DUP', 'dup.>');
	my $url = $nats->plain_url;

	# the framework turns restart_after_crash off; a relay killed by a signal
	# must bring the server through a crash restart, as in production
	my $node = outbox_node('jsfaults', restart_after_crash => 'on', 'outbox.batch_size' => 200,
		'outbox.jetstream_timeout' => "'2s'");
	$node->safe_psql('postgres', qq{
		INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream)
		VALUES ('flow', 'flow.*', '$url', '{event_type}', 'FLOW'),
		       ('outage', 'outage.*', '$url', '{event_type}', 'OUTAGE'),
		       ('frozen', 'frozen.*', '$url', '{event_type}', 'FROZEN');
	});
	return ($nats, $node);
}

# Checks that the messages of subject $type in stream $stream of $nats are
# exactly one per event of that type on $node (three tests, named after
# $what).
sub exactly_once
{
	my ($node, $nats, $type, $what, $stream) = @_;
	my @msgs = grep { $_->{subject} eq $type } @{ $nats->messages($stream) };
	my %stored;
	$stored{ $_->{headers}{'Nats-Msg-Id'} }++ for @msgs;
	my @ids = split /\n/,
	  $node->safe_psql('postgres', "SELECT event_id FROM outbox WHERE event_type = '$type' ORDER BY id");
	is(scalar @msgs, scalar @ids, "$what: one message per event (" . scalar(@ids) . ')');
	is_deeply([ sort keys %stored ], [ sort @ids ], "$what: the messages are the events'");
	is((grep { $_ != 1 } values %stored), 0, "$what: no event_id stored twice");
}

1;

# What the tests of the upgrade from 1.1 (063_upgrade_from_1_1.pl,
# 064_upgrade_from_1_1_events.pl) share: a server running the released 1.1
# from a copy of the installation (test/perl/OutboxUpgrade.pm) with a
# webhook, a NOTIFY channel, a JetStream stream (a real nats-server) and an
# ordered webhook, and events that 1.1 delivered, retries, dead-lettered
# and parked; then the steps of the upgrade both take. Each step that
# checks something is a test of the calling file.
#
#   my $u = start_1_1();              # or skip_all, as release_source says
#   $u->{inst}->install_new;
#   still_delivers($u);
#   restart_paused($u);
#   update_extension($u);
#   deliver_the_rest($u);
package OutboxUpgrade11;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use OutboxNats;
use OutboxTest;
use OutboxUpgrade;
use Test::More;

our @EXPORT = qw(start_1_1 emit_one still_delivers restart_paused update_extension
  deliver_the_rest);

# The version of the extension in a database.
our $version = q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'};

# The state of each event, in id order.
our $states = q{
	SELECT string_agg(event_type || ':' || CASE WHEN delivered_at IS NOT NULL THEN 'delivered'
	                                            WHEN dead_at IS NOT NULL THEN 'dead'
	                                            WHEN attempts > 0 THEN 'retrying'
	                                            ELSE 'pending' END, ',' ORDER BY id)
	  FROM outbox.outbox};

# Emits one event in database postgres of $node; returns its event_id.
sub emit_one
{
	my ($node, $type, $payload, $agg_type, $agg_id) = @_;
	my $args = join(', ', map { defined $_ ? "'$_'" : 'NULL' } $type, $payload // '{}', $agg_type, $agg_id);
	return $node->safe_psql('postgres', "SELECT outbox.outbox_emit($args)");
}

# Builds and installs 1.1, starts the nats-server, the sink and the node,
# creates the destinations and emits under 1.1; returns a hash of inst,
# nats, sink, node, id (event type or key => its event_ids), dead_row (a
# query of the dead event's row) and dead_11 (that row under 1.1).
sub start_1_1
{
	my $src = release_source('1.1');
	my $inst = OutboxUpgrade->new;
	$inst->install_release('1.1', $src);

	my $nats = start_nats();
	# a duplicate window longer than the retries last at these settings
	$nats->add_stream('EVENTS', 'events.>', duplicates_ms => 10 * 3600 * 1000);
	my $nats_url = $nats->plain_url;
	my $sink = start_sink();
	# the first attempt of the retrying event fails, every later one succeeds;
	# the dead one is refused with a 400 (dead-lettered at once)
	$sink->paths('/flaky' => { script => [ { status => 503 } ] }, '/reject' => { status => 400 });

	my $node = $inst->node('upgrade');
	$node->init;
	# settings 1.1 knows; retries an hour apart, so that the retrying event waits
	$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'outbox'
outbox.databases = 'postgres'
outbox.poll_interval = '200ms'
outbox.backoff_base = '1h'
outbox.backoff_max = '1h'
max_worker_processes = 16
jit = off
});
	$node->start;
	$node->safe_psql('postgres', 'CREATE SCHEMA outbox; CREATE EXTENSION outbox SCHEMA outbox');
	is($node->safe_psql('postgres', $version), '1.1', 'the extension is 1.1');

	$node->safe_psql('postgres', sprintf(q{
		INSERT INTO outbox.outbox_destinations (name, event_types, url) VALUES
			('hook', 'hook.*', '%s'), ('flaky', 'flaky.*', '%s'), ('reject', 'reject.*', '%s');
		INSERT INTO outbox.outbox_destinations (name, event_types, url, ordered, timeout_ms) VALUES
			('ordered', 'acct.*', '%s', true, 60000);
		INSERT INTO outbox.outbox_destinations (name, event_types, channel) VALUES
			('note', 'note.*', 'outbox_note');
		INSERT INTO outbox.outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream)
		VALUES ('js', 'js.*', '%s', 'events.{event_type}', 'EVENTS');},
		$sink->url('/hook'), $sink->url('/flaky'), $sink->url('/reject'), $sink->url('/ordered'), $nats_url));

	# under 1.1: delivered (*.first, and a-0 of the ordered destination),
	# retrying (flaky.retry: its first attempt answered 503), dead
	# (reject.dead: answered 400), parked (lost.parked: no destination)
	my %id;
	$id{'hook.first'} = [ map { emit_one($node, 'hook.first', qq({"n": $_})) } 1 .. 2 ];
	$id{$_} = [ emit_one($node, $_) ] for qw(note.first js.first);
	$id{'acct.a-0'} = [ emit_one($node, 'acct.opened', undef, 'acct', 'a-0') ];
	$id{'flaky.retry'} = [ emit_one($node, 'flaky.retry') ];
	$id{'reject.dead'} = [ emit_one($node, 'reject.dead') ];
	$id{'lost.parked'} = [ emit_one($node, 'lost.parked') ];
	my $before = 'hook.first:delivered,hook.first:delivered,note.first:delivered,js.first:delivered,'
	  . 'acct.opened:delivered,flaky.retry:retrying,reject.dead:dead,lost.parked:pending';
	ok( $node->poll_query_until('postgres', qq{
			SELECT ($states) = '$before' AND (SELECT last_error IS NOT NULL FROM outbox.outbox
			                                   WHERE event_type = 'lost.parked')}),
		'1.1 delivered events of every kind, retries one, dead-lettered one and parked one')
	  or diag($node->safe_psql('postgres', $states));
	my $dead_row = qq{
		SELECT concat_ws('/', attempts, delivered_at, dead_at, last_error)
		  FROM outbox.outbox WHERE event_id = '$id{'reject.dead'}[0]'};  # NULLs left out
	my $dead_11 = $node->safe_psql('postgres', $dead_row);
	like($dead_11, qr{^1/\d{4}-[^/]+/HTTP status 400}, 'the dead event: one attempt, dead-lettered for its 400');

	return { inst => $inst, nats => $nats, sink => $sink, node => $node, id => \%id,
		dead_row => $dead_row, dead_11 => $dead_11 };
}

# With the new build installed and the server not restarted yet: another
# webhook event (hook.still), which the 1.1 relay delivers.
sub still_delivers
{
	my ($u) = @_;
	$u->{id}{'hook.still'} = [ emit_one($u->{node}, 'hook.still') ];
	ok($u->{sink}->wait_delivered(3, '/hook'), 'the 1.1 relay still delivers meanwhile');
}

# The restart: the 1.2 library, the SQL objects of 1.1; waits until the
# relay says it pauses.
sub restart_paused
{
	my ($u) = @_;
	my $node = $u->{node};
	my $offset = -s $node->logfile;
	$node->restart;
	ok( wait_until(sub {
			log_since($node, $offset) =~ /WARNING:  outbox relay paused: the extension's SQL objects are version 1\.1, the library is version 1\.2\n.*HINT:  Run ALTER EXTENSION outbox UPDATE in this database\./
		}),
		'the relay pauses, saying to run ALTER EXTENSION UPDATE');
}

# ALTER EXTENSION outbox UPDATE in database postgres.
sub update_extension
{
	my ($u) = @_;
	$u->{node}->safe_psql('postgres', 'ALTER EXTENSION outbox UPDATE');
	is($u->{node}->safe_psql('postgres', qq{SELECT ($version) || ' ' || outbox.outbox_library_version()}),
		'1.2 1.2', 'the SQL objects and the library are 1.2');
}

# After the update: the retrying event made due, the parked one given a
# destination; waits until every event but the dead one is delivered.
sub deliver_the_rest
{
	my ($u) = @_;
	my $node = $u->{node};
	$node->safe_psql('postgres', sprintf(q{
		SELECT outbox.outbox_redeliver('%s');
		INSERT INTO outbox.outbox_destinations (name, event_types, url) VALUES ('found', 'lost.*', '%s');},
		$u->{id}{'flaky.retry'}[0], $u->{sink}->url('/found')));
	ok( $node->poll_query_until('postgres',
			q{SELECT count(*) = 0 FROM outbox.outbox WHERE delivered_at IS NULL AND dead_at IS NULL}),
		'every event but the dead one is delivered');
}

1;

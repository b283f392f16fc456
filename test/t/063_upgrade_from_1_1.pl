# The upgrade from 1.1, as the README's Upgrading section says to do it,
# with events of every kind pending across it: a server runs the released
# 1.1 (built from the repository's history) with a webhook, a NOTIFY
# channel, a JetStream stream (a real nats-server) and an ordered webhook,
# some of their events delivered, others waiting, one retrying, one dead
# and one that no destination takes. The new build is installed under the
# running server: ALTER EXTENSION UPDATE and CREATE EXTENSION are refused
# and change nothing, and the 1.1 relay still delivers. After the restart
# the relay pauses until ALTER EXTENSION UPDATE while the application keeps
# emitting; then every waiting event comes through once, the ordered ones
# in order along the rebuilt outbox_key_idx, the dead one stays dead, and
# pg_dump of the upgraded database restores cleanly.
#
# The server runs from a copy of the installation under this test's
# directory, into which 1.1 and then the new build are installed
# (test/perl/OutboxUpgrade.pm). The 1.1 source comes from ci/check.sh
# (OUTBOX_1_1_SRC, extracted with git archive).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxNats;
use OutboxTest;
use OutboxUpgrade;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

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
my $version = q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'};
is($node->safe_psql('postgres', $version), '1.1', 'the extension is 1.1');
$node->safe_psql('postgres', 'CREATE DATABASE other');

# Emits one event in database postgres; returns its event_id.
sub emit_one
{
	my ($type, $payload, $agg_type, $agg_id) = @_;
	my $args = join(', ', map { defined $_ ? "'$_'" : 'NULL' } $type, $payload // '{}', $agg_type, $agg_id);
	return $node->safe_psql('postgres', "SELECT outbox.outbox_emit($args)");
}

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
$id{'hook.first'} = [ map { emit_one('hook.first', qq({"n": $_})) } 1 .. 2 ];
$id{$_} = [ emit_one($_) ] for qw(note.first js.first);
$id{'acct.a-0'} = [ emit_one('acct.opened', undef, 'acct', 'a-0') ];
$id{'flaky.retry'} = [ emit_one('flaky.retry') ];
$id{'reject.dead'} = [ emit_one('reject.dead') ];
$id{'lost.parked'} = [ emit_one('lost.parked') ];
my $states = q{
	SELECT string_agg(event_type || ':' || CASE WHEN delivered_at IS NOT NULL THEN 'delivered'
	                                            WHEN dead_at IS NOT NULL THEN 'dead'
	                                            WHEN attempts > 0 THEN 'retrying'
	                                            ELSE 'pending' END, ',' ORDER BY id)
	  FROM outbox.outbox};
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

# the new build installed, no restart yet: the update is refused, says why,
# and changes nothing
my $objects = q{
	SELECT (SELECT string_agg(pg_describe_object(classid, objid, objsubid), ',' ORDER BY 1)
	          FROM pg_depend
	         WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox') AND deptype = 'e')
	    || pg_get_indexdef('outbox.outbox_key_idx'::regclass)
	    || pg_get_viewdef('outbox._outbox_pending'::regclass)
	    || pg_get_viewdef('outbox.outbox_status'::regclass)};
my $objects_11 = $node->safe_psql('postgres', $objects);
$inst->install_new;
my $older = qr/ERROR:  55000: the outbox library loaded in this server is older than version 1\.2\n/;
my $again = qr/HINT:  Restart the server, then run the statement again \(CREATE EXTENSION outbox, or ALTER EXTENSION outbox UPDATE\)\./;
my ($ret, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\nALTER EXTENSION outbox UPDATE");
isnt($ret, 0, 'ALTER EXTENSION UPDATE before the restart fails');
like($err, $older, 'with SQLSTATE 55000: the library loaded is older than 1.2');
like($err, $again, 'which says to restart, then run the statement again');
unlike($err, qr/could not find function/, 'not "could not find function"');
is($node->safe_psql('postgres', $version), '1.1', 'the extension is still 1.1');
is($node->safe_psql('postgres', $objects), $objects_11, 'its objects are those of 1.1, unchanged');
($ret, $out, $err) = $node->psql('other', "\\set VERBOSITY verbose\nCREATE EXTENSION outbox");
isnt($ret, 0, 'CREATE EXTENSION in another database before the restart fails');
like($err, $older, 'the same way');
like($err, $again, 'its hint says to run the statement again');
is($node->safe_psql('other', q{SELECT count(*) FROM pg_extension WHERE extname = 'outbox'}),
	'0', 'and leaves no extension behind');
$id{'hook.still'} = [ emit_one('hook.still') ];
ok($sink->wait_delivered(3, '/hook'), 'the 1.1 relay still delivers meanwhile');

# events of every kind written by 1.1 and still waiting at the restart: the
# relay is stopped (no database listed) while they are emitted
set_databases($node, '');
ok(wait_no_relay($node, 'postgres'), 'the 1.1 relay stopped');
$id{'hook.pending'} = [ emit_one('hook.pending') ];
$id{'note.pending'} = [ emit_one('note.pending') ];
$id{'js.pending'} = [ emit_one('js.pending') ];
$id{'acct.a-1'} = [ emit_one('acct.opened', undef, 'acct', 'a-1'), emit_one('acct.changed', undef, 'acct', 'a-1') ];
$node->safe_psql('postgres', 'ALTER SYSTEM RESET outbox.databases');

# the restart: the 1.2 library, the SQL objects of 1.1
my $offset = -s $node->logfile;
$node->restart;
ok( wait_until(sub {
		log_since($node, $offset) =~ /WARNING:  outbox relay paused: the extension's SQL objects are version 1\.1, the library is version 1\.2\n.*HINT:  Run ALTER EXTENSION outbox UPDATE in this database\./
	}),
	'the relay pauses, saying to run ALTER EXTENSION UPDATE');
($ret, $out, $err) = $node->psql('postgres', 'SELECT * FROM outbox.outbox_relay()');
like($err, qr/ERROR:  the extension's SQL objects are version 1\.1, the library is version 1\.2\n.*HINT:  Run ALTER EXTENSION outbox UPDATE in this database\./s,
	'outbox_relay() fails, saying to run ALTER EXTENSION UPDATE');
# the application emits meanwhile, one more event of the ordered key a-1 too
$id{$_} = [ emit_one($_) ] for qw(hook.during note.during js.during);
push @{ $id{'acct.a-1'} }, emit_one('acct.closed', undef, 'acct', 'a-1');
ok(!grep({ $_ eq '' } map { @$_ } values %id), 'outbox_emit works before the update');

my $listener = start_listener($node, 'postgres', 'outbox_note');
# the ordered key's first answer is held, so that the others wait behind it
my @a1 = @{ $id{'acct.a-1'} };
$sink->control(hold_ids => [ $a1[0] ]);
my $updated_at = time;
$node->safe_psql('postgres', 'ALTER EXTENSION outbox UPDATE');
is($node->safe_psql('postgres', qq{SELECT ($version) || ' ' || outbox.outbox_library_version()}),
	'1.2 1.2', 'the SQL objects and the library are 1.2');

# the relay resumes; the ordered key waits for its first event, which the
# claim view finds before the others along the rebuilt outbox_key_idx
ok( wait_until(sub {
		grep { $_->{webhook_id} eq $a1[0] } @{ $sink->arrivals('/ordered') } }),
	'the first event of key a-1 is sent');
like($node->safe_psql('postgres', q{SELECT pg_get_indexdef('outbox.outbox_key_idx'::regclass)}),
	qr/USING btree \(outbox\._outbox_aggregate_key\(aggregate_type, aggregate_id\), id\)/,
	'outbox_key_idx is keyed by _outbox_aggregate_key');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(o.event_id || '<' || coalesce(b.event_id::text, '-'), ',' ORDER BY o.id)
		  FROM outbox._outbox_pending p JOIN outbox.outbox o ON o.id = p.id
		  LEFT JOIN outbox.outbox b ON b.id = p.blocked_by
		 WHERE p.dest_name = 'ordered'}),
	"$a1[0]<-,$a1[1]<$a1[0],$a1[2]<$a1[1]",
	'each event of key a-1 waits for the one before it');
my $plan = $node->safe_psql('postgres', q{
	SET enable_seqscan = off;
	EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON)
	SELECT blocked_by FROM outbox._outbox_pending WHERE dest_name = 'ordered'});
my @probes;
my @todo = (decode_json($plan)->[0]{Plan});
while (my $p = shift @todo)
{
	push @probes, $p if ($p->{'Index Name'} // '') eq 'outbox_key_idx' && ($p->{'Actual Loops'} // 0) > 0;
	push @todo, @{ $p->{Plans} // [] };
}
is(scalar @probes, 1, 'the probe for the event before walks the rebuilt outbox_key_idx') or diag($plan);
is(scalar(grep { $_->{webhook_id} ne $a1[0] } @{ $sink->arrivals('/ordered') }), 1,
	'only a-0 (under 1.1) and the first of a-1 were sent to the ordered destination');
$sink->control(hold_ids => []);

# the retrying event made due, the parked one given a destination
$node->safe_psql('postgres', sprintf(q{
	SELECT outbox.outbox_redeliver('%s');
	INSERT INTO outbox.outbox_destinations (name, event_types, url) VALUES ('found', 'lost.*', '%s');},
	$id{'flaky.retry'}[0], $sink->url('/found')));
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM outbox.outbox WHERE delivered_at IS NULL AND dead_at IS NULL}),
	'every event but the dead one is delivered');
is($node->safe_psql('postgres', $states),
	'hook.first:delivered,hook.first:delivered,note.first:delivered,js.first:delivered,'
	  . 'acct.opened:delivered,flaky.retry:delivered,reject.dead:dead,lost.parked:delivered,'
	  . 'hook.still:delivered,hook.pending:delivered,note.pending:delivered,js.pending:delivered,'
	  . 'acct.opened:delivered,acct.changed:delivered,hook.during:delivered,note.during:delivered,'
	  . 'js.during:delivered,acct.closed:delivered',
	'the state of each event');

# webhooks: each event once with a 2xx, none of the waiting ones before the update
my @webhook = map { @{ $id{$_} } } qw(hook.first hook.still hook.pending hook.during
  acct.a-0 acct.a-1 flaky.retry lost.parked);
is_deeply(count_by_id($sink->delivered), { map { ($_ => 1) } @webhook },
	'the webhook endpoints received each event once with a 2xx');
my %waiting = map { ($_ => 1) } map { @{ $id{$_} } } qw(hook.pending hook.during acct.a-1 flaky.retry lost.parked);
is(scalar(grep { $waiting{ $_->{webhook_id} } && $_->{received_at} < $updated_at } @{ $sink->delivered }),
	0, 'no waiting event was delivered before the update: the relay paused');
is_deeply([ map { "$_->{status}" } grep { $_->{webhook_id} eq $id{'flaky.retry'}[0] } @{ $sink->requests('/flaky') } ],
	[ '503', '200' ], 'the retrying event: its 503 under 1.1, then one 200');
is_deeply([ map { $_->{path} } grep { $_->{webhook_id} eq $id{'lost.parked'}[0] } @{ $sink->requests } ],
	['/found'], 'the parked event went to the destination that takes it, once');

# the ordered destination: a-1 in order, each sent once the one before was answered
my @ordered = grep { $_->{status} >= 200 && $_->{status} < 300 } @{ $sink->arrivals('/ordered') };
is_deeply([ map { $_->{webhook_id} } @ordered ], [ @{ $id{'acct.a-0'} }, @a1 ],
	'the ordered destination received a-0, then a-1 in order');
is(scalar(grep { $ordered[$_]{received_at} < $ordered[ $_ - 1 ]{answered_at} } 2 .. $#ordered), 0,
	'each event of a-1 sent after the one before it was answered');

# NOTIFY: the listener gets the waiting events once each, not the dead one;
# catch-up returns every event the channel was sent, 1.1's included
ok($listener->sync, 'the listener has every notification committed so far');
my %noted;
$noted{ decode_json($_->{payload})->{id} }++ for @{ $listener->notes };
is_deeply(\%noted, { map { ($_ => 1) } map { @{ $id{$_} } } qw(note.pending note.during) },
	'the NOTIFY listener received each waiting event once');
$listener->quit;
is_deeply([ split /\n/, $node->safe_psql('postgres', q{
		SELECT event_id FROM outbox.outbox_catch_up('note', 'c', '1 day') ORDER BY event_id}) ],
	[ sort map { @{ $id{$_} } } qw(note.first note.pending note.during) ],
	'catch-up returns the events sent to the channel under 1.1 and 1.2');

# JetStream: one message per event
my %stored;
$stored{ $_->{headers}{'Nats-Msg-Id'} }++ for @{ $nats->messages('EVENTS') };
is_deeply(\%stored, { map { ($_ => 1) } map { @{ $id{$_} } } qw(js.first js.pending js.during) },
	'the stream holds one message per event');
is($nats->count('EVENTS'), '3', 'three messages in all');

# the dead one stays dead, as 1.1 left it
is($node->safe_psql('postgres', $dead_row), $dead_11, 'the dead event stays dead, as 1.1 left it');
is(scalar @{ $sink->requests('/reject') }, 1, 'and was not sent again');
is($node->safe_psql('postgres', q{SELECT concat_ws(' ', event_type, pending, dead) FROM outbox.outbox_status}),
	'reject.dead 0 1', 'outbox_status shows the dead event only');

# the other database can create the extension now
$node->safe_psql('other', 'CREATE EXTENSION outbox');
is($node->safe_psql('other', $version), '1.2', 'CREATE EXTENSION after the restart makes 1.2');

# pg_dump of the upgraded database restores cleanly, rows included
my $rows = q{
	SELECT (SELECT string_agg(concat_ws('/', id, event_id, event_type, aggregate_id, attempts, delivered_at,
	                                    dead_at, redelivered_at, last_error, destination), ',' ORDER BY id)
	          FROM outbox.outbox)
	    || (SELECT string_agg(concat_ws('/', name, kind, event_types, url, channel, nats_servers,
	                                    nats_subject, nats_stream, ordered, enabled), ',' ORDER BY name)
	          FROM outbox.outbox_destinations)};
my $dump = $inst->tmp . '/upgraded.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('postgres') ], 'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_checks_all(
	[ 'pg_restore', '--exit-on-error', '-d', $node->connstr('restored'), $dump ],
	0, [qr/^$/], [qr/^$/], 'pg_restore: no error, no warning');
is($node->safe_psql('restored', $rows), $node->safe_psql('postgres', $rows),
	'events and destinations restored as they were');
is($node->safe_psql('restored', $version), '1.2', 'the restored extension is 1.2');

$sink->stop;
$node->stop;
$nats->stop;
done_testing();

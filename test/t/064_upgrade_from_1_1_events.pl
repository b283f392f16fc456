# The upgrade from 1.1, as the README's Upgrading section says to do it,
# with events of every kind pending across it: a server runs the released
# 1.1 (built from the repository's history) with a webhook, a NOTIFY
# channel, a JetStream stream (a real nats-server) and an ordered webhook,
# some of their events delivered, others waiting, one retrying, one dead
# and one that no destination takes. This file checks what becomes of the
# events:
#   - events of every kind emitted while the 1.1 relay is stopped, and
#     while the relay pauses after the restart, wait for ALTER EXTENSION
#     UPDATE (outbox_emit works meanwhile);
#   - after it, every waiting event comes through once: the webhook ones
#     with one 2xx each, none before the update, the retrying one after
#     its 503 under 1.1, the parked one to the destination that takes it;
#     the ordered ones in order, each waiting for the one before it along
#     the rebuilt outbox_key_idx; NOTIFY and catch-up; one JetStream
#     message each;
#   - the dead one stays dead, as 1.1 left it;
#   - pg_dump of the upgraded database restores cleanly, rows included.
# The statements of the upgrade, refused before the restart:
# 063_upgrade_from_1_1.pl.
#
# The server runs from a copy of the installation under this test's
# directory, into which 1.1 and then the new build are installed
# (test/perl/OutboxUpgrade.pm, the scenario in test/perl/OutboxUpgrade11.pm).
# The 1.1 source comes from ci/check.sh (OUTBOX_1_1_SRC, extracted with git
# archive).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use OutboxUpgrade11;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $u = start_1_1();
my ($node, $sink, $nats) = ($u->{node}, $u->{sink}, $u->{nats});
$u->{inst}->install_new;
still_delivers($u);
my %id = %{ $u->{id} };

# events of every kind written by 1.1 and still waiting at the restart: the
# relay is stopped (no database listed) while they are emitted
set_databases($node, '');
ok(wait_no_relay($node, 'postgres'), 'the 1.1 relay stopped');
$id{'hook.pending'} = [ emit_one($node, 'hook.pending') ];
$id{'note.pending'} = [ emit_one($node, 'note.pending') ];
$id{'js.pending'} = [ emit_one($node, 'js.pending') ];
$id{'acct.a-1'} = [ emit_one($node, 'acct.opened', undef, 'acct', 'a-1'),
	emit_one($node, 'acct.changed', undef, 'acct', 'a-1') ];
$node->safe_psql('postgres', 'ALTER SYSTEM RESET outbox.databases');

restart_paused($u);
# the application emits meanwhile, one more event of the ordered key a-1 too
$id{$_} = [ emit_one($node, $_) ] for qw(hook.during note.during js.during);
push @{ $id{'acct.a-1'} }, emit_one($node, 'acct.closed', undef, 'acct', 'a-1');
ok(!grep({ $_ eq '' } map { @$_ } values %id), 'outbox_emit works before the update');

my $listener = start_listener($node, 'postgres', 'outbox_note');
# the ordered key's first answer is held, so that the others wait behind it
my @a1 = @{ $id{'acct.a-1'} };
$sink->control(hold_ids => [ $a1[0] ]);
my $updated_at = time;
update_extension($u);

# the relay resumes; the ordered key waits for its first event, which the
# claim view finds before the others along the rebuilt outbox_key_idx
ok( wait_until(sub {
		grep { $_->{webhook_id} eq $a1[0] } @{ $sink->arrivals('/ordered') } }),
	'the first event of key a-1 is sent');
like($node->safe_psql('postgres', q{SELECT pg_get_indexdef('outbox.outbox_key_idx'::regclass)}),
	qr/USING btree \(outbox\._outbox_aggregate_key\(aggregate_type, aggregate_id\), COALESCE\(origin_id, id\)\)/,
	'outbox_key_idx is keyed by _outbox_aggregate_key, and by place in the order');
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

deliver_the_rest($u);
is($node->safe_psql('postgres', $OutboxUpgrade11::states),
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
is($node->safe_psql('postgres', $u->{dead_row}), $u->{dead_11}, 'the dead event stays dead, as 1.1 left it');
is(scalar @{ $sink->requests('/reject') }, 1, 'and was not sent again');
is($node->safe_psql('postgres', q{SELECT concat_ws(' ', event_type, pending, dead) FROM outbox.outbox_status}),
	'reject.dead 0 1', 'outbox_status shows the dead event only');

# pg_dump of the upgraded database restores cleanly, rows included
my $rows = q{
	SELECT (SELECT string_agg(concat_ws('/', id, event_id, event_type, aggregate_id, attempts, delivered_at,
	                                    dead_at, redelivered_at, last_error, destination), ',' ORDER BY id)
	          FROM outbox.outbox)
	    || (SELECT string_agg(concat_ws('/', name, kind, event_types, url, channel, nats_servers,
	                                    nats_subject, nats_stream, ordered, enabled), ',' ORDER BY name)
	          FROM outbox.outbox_destinations)};
my $dump = $u->{inst}->tmp . '/upgraded.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('postgres') ], 'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_checks_all(
	[ 'pg_restore', '--exit-on-error', '-d', $node->connstr('restored'), $dump ],
	0, [qr/^$/], [qr/^$/], 'pg_restore: no error, no warning');
is($node->safe_psql('restored', $rows), $node->safe_psql('postgres', $rows),
	'events and destinations restored as they were');
is($node->safe_psql('restored', $OutboxUpgrade11::version), '1.2', 'the restored extension is 1.2');

$sink->stop;
$node->stop;
$nats->stop;
done_testing();

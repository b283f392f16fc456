# NOTIFY destinations seen by a real LISTEN client: every event arrives
# exactly once with its envelope; nothing arrives for a relay pass that rolled
# back; an envelope of 8000 bytes or more is never cut: the event is
# delivered in the reference form (without its payload), while one of 7999
# bytes arrives intact.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use Encode qw(decode_utf8);
use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('notify');

# A UTF-8 database, whatever the locale of the test environment, so that
# multibyte text has a known size in bytes.
$node->safe_psql('postgres',
	"CREATE DATABASE notify ENCODING 'UTF8' LOCALE 'C' TEMPLATE template0");
$node->safe_psql('notify', q{
	CREATE EXTENSION outbox;
	INSERT INTO outbox_destinations (name, event_types, channel)
	VALUES ('listen', 'note.*', 'outbox_events');
});

set_databases($node, 'notify');
my $relay_pid = wait_relay($node, 'notify');
ok($relay_pid, 'relay runs in database notify');

# The listener. psql prints the notifications it has received after each
# command, so a trivial query collects them.
my $listener = $node->background_psql('notify');
$listener->set_query_timer_restart;
$listener->query_safe('LISTEN outbox_events');

my @notes;    # every notification received, in order

sub collect
{
	my $out = $listener->query_safe('SELECT 1');
	while ($out =~ /^Asynchronous notification "([^"]*)" with payload "(.*)" received from server process with PID (\d+)\.$/mg)
	{
		push @notes, { channel => $1, payload => $2, pid => $3 };
	}
	return;
}

# Collects notifications until $cond returns true (or the timeout).
sub collect_until
{
	my ($cond) = @_;
	return wait_until(sub { collect(); return $cond->(); });
}

# Notifications are delivered in commit order: once a marker sent after some
# transaction has arrived, anything that transaction notified has arrived too.
my $markers = 0;

sub sync_listener
{
	my $marker = 'marker-' . ++$markers;
	$node->safe_psql('notify', "NOTIFY outbox_events, '$marker'");
	return collect_until(sub { grep { $_->{payload} eq $marker } @notes });
}

# the events among the notifications, decoded: event id => list of envelopes
sub events_received
{
	my %got;
	for my $n (@notes)
	{
		next unless $n->{payload} =~ /^\{/;
		my $env = decode_json($n->{payload});
		push @{ $got{ $env->{id} } }, { %$env, pid => $n->{pid}, raw => $n->{payload} };
	}
	return \%got;
}

############################################################################
# Every event arrives, exactly once: 20 emitted in one transaction and 30 in
# a transaction each.

my @ids = split /\n/, $node->safe_psql('notify',
	"SELECT outbox_emit('note.batch', jsonb_build_object('n', g), 'note', g::text) FROM generate_series(1, 20) g");
push @ids, split /\n/, $node->safe_psql('notify',
	join('', map { "SELECT outbox_emit('note.single', jsonb_build_object('n', $_), 'note', '$_');\n" } 21 .. 50));
is(scalar @ids, 50, '50 events emitted');

ok( $node->poll_query_until('notify',
		"SELECT count(*) = 50 FROM outbox WHERE delivered_at IS NOT NULL"),
	'all 50 marked delivered');
ok(collect_until(sub { keys %{ events_received() } >= 50 }), 'the listener received 50 events');
ok(sync_listener(), 'listener in sync');

my $got = events_received();
is_deeply([ sort keys %$got ], [ sort @ids ], 'the ids received are the ids emitted');
is_deeply([ grep { @{ $got->{$_} } != 1 } sort keys %$got ], [], 'each exactly once');
is(scalar(grep { $_->{channel} ne 'outbox_events' } @notes), 0, 'all on the destination channel');

my %n_of = map { $ids[$_] => $_ + 1 } 0 .. $#ids;
my @bad = grep {
	my $e = $got->{$_}[0];
	$e->{type} ne ($n_of{$_} <= 20 ? 'note.batch' : 'note.single')
	  || $e->{aggregate_type} ne 'note'
	  || $e->{aggregate_id} ne "$n_of{$_}"
	  || $e->{attempt} != 1
	  || $e->{payload}{n} != $n_of{$_}
	  || $e->{created_at} !~ /^\d{4}-\d\d-\d\dT/
	  || $e->{pid} != $relay_pid
} @ids;
is_deeply(\@bad, [], 'each envelope has its event, type, aggregate, attempt 1, payload; sent by the relay');
is( $node->safe_psql('notify',
		"SELECT count(*) FROM outbox WHERE delivered_at IS NOT NULL AND attempts = 1 AND destination = 'listen' AND last_error IS NULL"),
	'50', 'the table marks all of them delivered, one attempt each');

############################################################################
# A relay pass that rolls back sends nothing: with the worker stopped, call
# outbox_relay() in a transaction that is rolled back.

set_databases($node, '');
ok(wait_no_relay($node, 'notify'), 'worker stopped');

@notes = ();
my $rb_id = $node->safe_psql('notify', "SELECT outbox_emit('note.rolledback', '{\"n\": 0}')");
is( $node->safe_psql('notify', q{
		BEGIN;
		SELECT delivered, failed FROM outbox_relay();
		ROLLBACK;
	}),
	'1|0', 'the pass delivered the event inside the transaction');
ok(sync_listener(), 'listener in sync after the rollback');
is(scalar keys %{ events_received() }, 0, 'nothing received from the rolled-back pass');
is( $node->safe_psql('notify',
		"SELECT delivered_at IS NULL AND dead_at IS NULL AND attempts = 0 FROM outbox WHERE event_id = '$rb_id'"),
	't', 'the event is still pending, no attempt recorded');

# the worker comes back and delivers it, once
set_databases($node, 'notify');
ok( $node->poll_query_until('notify',
		"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$rb_id'"),
	'the worker delivers it once started again');
ok(sync_listener(), 'listener in sync');
$got = events_received();
is_deeply([ keys %$got ], [$rb_id], 'received now, and only it');
is(scalar @{ $got->{$rb_id} }, 1, 'exactly once');

############################################################################
# Size limit: an envelope of 8000 bytes or more is never cut: the event is
# delivered, and the notification is its reference (the envelope without
# "payload"); one of 7999 bytes arrives whole. The text is multibyte ('ж'
# is 2 bytes), so bytes and characters differ.

# the envelope the relay sends for an event (attempt: attempts + 1 before it)
my $envelope = q{_outbox_envelope(event_id, event_type, aggregate_type, aggregate_id,
	created_at, %s, payload)};

@notes = ();
$node->safe_psql('notify', sprintf(q{
	BEGIN;
	SELECT outbox_emit('note.huge', jsonb_build_object('text', repeat('ж', 4100)), 'note', 'huge');
	SELECT outbox_emit('note.edge', '{"text": ""}', 'note', 'edge-8000');
	SELECT outbox_emit('note.edge', '{"text": ""}', 'note', 'edge-7999');
	-- fill the text so that the envelope has exactly the size in aggregate_id
	UPDATE outbox o
	   SET payload = jsonb_build_object('text', repeat('ж', f.room / 2) || repeat('a', f.room %% 2))
	  FROM (SELECT id, split_part(aggregate_id, '-', 2)::int - octet_length(%s) AS room
	          FROM outbox WHERE aggregate_id LIKE 'edge-%%') f
	 WHERE o.id = f.id;
	COMMIT;
}, sprintf($envelope, 'attempts + 1')));

ok( $node->poll_query_until('notify',
		"SELECT count(*) = 3 FROM outbox WHERE aggregate_id IN ('huge', 'edge-8000', 'edge-7999') AND attempts = 1"),
	'the three events were processed');
my %row;
my %event_of;
for my $line (split /\n/, $node->safe_psql('notify', sprintf(
	"SELECT aggregate_id, event_id, octet_length(%s), delivered_at IS NOT NULL, dead_at IS NOT NULL, coalesce(last_error, '')
	   FROM outbox WHERE aggregate_id IN ('huge', 'edge-8000', 'edge-7999')", sprintf($envelope, 'attempts'))))
{
	my ($agg, $id, @cols) = split /\|/, $line, -1;
	$row{$agg} = \@cols;
	$event_of{$agg} = $id;
}
my $huge_size = $row{huge}[0];
cmp_ok($huge_size, '>', 8200, "the huge envelope: $huge_size bytes");
is_deeply(
	\%row,
	{
		'edge-7999' => [ 7999, 't', 'f', '' ],
		'edge-8000' => [ 8000, 't', 'f', '' ],
		huge => [ $huge_size, 't', 'f', '' ],
	},
	'all three delivered, none dead-lettered, no error');
is( $node->safe_psql('notify', "SELECT length(payload->>'text'), octet_length(payload->>'text') FROM outbox WHERE aggregate_id = 'huge'"),
	'4100|8200', 'the huge text: 4100 characters, 8200 bytes');

ok(sync_listener(), 'listener in sync');
$got = events_received();
is_deeply([ sort keys %$got ], [ sort values %event_of ], 'the three were received');
is_deeply([ grep { @{ $got->{$_} } != 1 } keys %$got ], [], 'each once');
for my $agg ('huge', 'edge-8000')
{
	my $ref = $got->{ $event_of{$agg} }[0];
	is_deeply(
		[ sort grep { $_ ne 'raw' && $_ ne 'pid' } keys %$ref ],
		[qw(aggregate_id aggregate_type attempt created_at id type)],
		"$agg: the reference form, without payload");
	is(join('|', @$ref{qw(type aggregate_type aggregate_id attempt)}),
		"note.@{[ $agg eq 'huge' ? 'huge' : 'edge' ]}|note|$agg|1", "$agg: its type, aggregate and attempt");
}
my ($edge_raw, $edge_text) = split /\|/, $node->safe_psql('notify',
	sprintf("SELECT %s, payload->>'text' FROM outbox WHERE aggregate_id = 'edge-7999'",
		sprintf($envelope, 'attempts')));
my $recv = $got->{ $event_of{'edge-7999'} }[0];
is(length($recv->{raw}), 7999, 'received payload: 7999 bytes');
ok($recv->{raw} eq $edge_raw, 'byte for byte the envelope the relay built');
is($recv->{payload}{text}, decode_utf8($edge_text), 'payload text intact');
like($recv->{payload}{text}, qr/^\x{0436}{3500,}a?$/, 'multibyte text, not cut');

$listener->quit;
$node->stop;
done_testing();

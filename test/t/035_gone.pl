# A webhook that answers 410 Gone is disabled (the Standard Webhooks
# specification: the sender should stop sending to that endpoint): the
# reason and time are in outbox_destinations, the 410 in the statistics and
# the log; its events stay pending, none dead-lettered (not even at
# outbox.max_attempts, 2 here) and none sent to a catch-all NOTIFY channel
# that any listener may read (1.1 routed them there once the webhook was
# disabled), while another destination keeps flowing; enabling it again
# sends them. A 410 from a URL the destination no longer
# has (it was moved while the request was out) disables nothing. The relay
# never waits to disable one: while a session holds outbox_destinations
# locked (as a claim that parks events does), the destination stays enabled
# and the other destinations flow; the next 410 after that disables it.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('gone', 'outbox.max_attempts' => 2);
my $sink = start_sink();
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');
sub sql { return $node->safe_psql('postgres', $_[0]); }

$sink->paths('/gone' => { status => 410 }, '/old' => { status => 410, hold => JSON::PP::true });
sql(sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES
		('gone', 'g.*', '%s'), ('other', 'o.*', '%s'), ('moved', 'm.*', '%s'), ('locked', 'l.*', '%s')},
	$sink->url('/gone'), $sink->url('/ok'), $sink->url('/old'), $sink->url('/gone')));
# 1.1's routing, the first match by name, under which the catch-all takes
# only what no other destination takes: with fan-out it takes every event,
# as any destination whose pattern matches (046_fan_out.pl)
sql(q{SELECT outbox_set_routing('first')});
sql(q{INSERT INTO outbox_destinations (name, event_types, channel, notify_mode)
      VALUES ('zz_all', '*', 'outbox_all', 'full')});

my $log_offset = -s $node->logfile;
my @gone = @{ emit($node, 'postgres', 'g.step', 3) };
ok($node->poll_query_until('postgres', q{SELECT NOT enabled FROM outbox_destinations WHERE name = 'gone'}),
	'the destination is disabled after a 410');
like( sql(q{SELECT disabled_at > now() - interval '1 minute', disabled_reason FROM outbox_destinations WHERE name = 'gone'}),
	qr/^t\|the endpoint answered 410 Gone to event [0-9a-f-]{36}$/, 'disabled_at and disabled_reason say when and why');
like(slurp_file($node->logfile, $log_offset),
	qr/WARNING:  destination "gone" was disabled: its endpoint answered 410 Gone/,
	'the log says so');
like( sql(q{SELECT last_error FROM outbox_destination_stats() WHERE destination = 'gone'}),
	qr/^HTTP status 410 \(Gone: the destination is disabled until it is enabled again\)/,
	'the statistics show the 410');

# the other destination flows meanwhile; the disabled one's events wait
my @other = @{ emit($node, 'postgres', 'o.step', 20) };
ok($sink->wait_delivered(20, '/ok'), "another destination's 20 events are delivered");
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 3 FROM outbox
		 WHERE event_type = 'g.step' AND last_error = 'no enabled destination matches the event type'}),
	'the disabled destination\'s events are parked as unroutable');
is(sql(q{SELECT count(*) FROM outbox WHERE event_type = 'g.step' AND (dead_at IS NOT NULL OR delivered_at IS NOT NULL)}),
	'0', 'none is dead-lettered, nor delivered to the catch-all channel');
my $requests = scalar @{ $sink->requests('/gone') };
ok($requests >= 1 && $requests <= 3, "the endpoint got at most one request per event ($requests)");

# enabled again: both columns cleared, the events go
$sink->paths('/gone' => { status => 200 }, '/old' => { status => 410, hold => JSON::PP::true });
sql(q{UPDATE outbox_destinations SET enabled = true WHERE name = 'gone'});
is(sql(q{SELECT disabled_at IS NULL AND disabled_reason IS NULL FROM outbox_destinations WHERE name = 'gone'}),
	't', 'enabling clears disabled_at and disabled_reason');
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 3 FROM outbox WHERE event_type = 'g.step' AND delivered_at IS NOT NULL}),
	'its events are delivered once it is enabled');
is(join(',', @{ $sink->delivered_ids('/gone') }), join(',', sort @gone),
	'each of the three events arrived with a 2xx answer');

# a 410 from the URL the destination had when the request went out, after
# it was moved: the destination stays enabled, the event goes to the new URL
my ($moved) = @{ emit($node, 'postgres', 'm.step', 1) };
ok(wait_until(sub { $sink->stats('/old')->{arrived} == 1 }), 'the request to the old URL is out');
sql(sprintf(q{UPDATE outbox_destinations SET url = '%s' WHERE name = 'moved'}, $sink->url('/new')));
$sink->control(release => '/old');
ok( $node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$moved'"),
	'the event is delivered to the new URL');
is( sql(q{SELECT enabled, disabled_at IS NULL FROM outbox_destinations WHERE name = 'moved'}),
	't|t', 'a 410 from the old URL leaves the destination enabled');
is(join(',', map { $_->{status} } @{ $sink->requests('/old') }, @{ $sink->requests('/new') }),
	'410,200', 'answered 410 at the old URL, then 200 at the new one');
# a 410 while a session holds the table locked: the relay does not wait
$sink->paths('/gone' => { status => 410 });
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN; LOCK TABLE outbox_destinations IN SHARE MODE;');
$log_offset = -s $node->logfile;
my ($locked) = @{ emit($node, 'postgres', 'l.step', 1) };
ok( $node->poll_query_until('postgres',
		"SELECT attempts >= 1 AND last_error LIKE 'HTTP status 410 %' FROM outbox WHERE event_id = '$locked'"),
	'a 410 while the table is locked: the attempt is recorded');
my @flow = @{ emit($node, 'postgres', 'o.more', 10) };
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 10 FROM outbox WHERE event_type = 'o.more' AND delivered_at IS NOT NULL}),
	'the other destination flows meanwhile: the relay did not wait');
is(sql(q{SELECT enabled FROM outbox_destinations WHERE name = 'locked'}), 't', 'the destination is still enabled');
like(slurp_file($node->logfile, $log_offset),
	qr/LOG:  could not disable destination "locked" now: outbox_destinations is locked/, 'the log says why');
$locker->query_safe('COMMIT');
ok($node->poll_query_until('postgres', q{SELECT NOT enabled FROM outbox_destinations WHERE name = 'locked'}),
	'once the lock is gone, the next 410 disables it');
is( sql("SELECT attempts >= 2 AND dead_at IS NULL AND delivered_at IS NULL FROM outbox WHERE event_id = '$locked'"),
	't', 'its event is not dead-lettered at outbox.max_attempts: it waits for the destination');
$locker->quit;
is(relay_pid($node, 'postgres'), $pid, 'the same relay throughout');

$sink->stop;
$node->stop;
done_testing();

# A 429, 502, 503 or 504 answer with Retry-After sets the time of the next
# attempt, in either form the header takes (seconds, or an HTTP-date),
# instead of the backoff (outbox.backoff_base is 100 ms here), and capped
# by outbox.backoff_max, however large the number of seconds. Other
# statuses (a 500) do not honour it.
#
# Each case answers its status once, then 200; the gap between the two
# requests is read from the times the sink recorded.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('retry_after');
my $sink = start_sink();
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

# name => first answer
my %case = (
	seconds => { status => 503, retry_after => '2' },
	date => { status => 429, retry_after_in => 3 },
	ignored => { status => 500, retry_after => '3600' },
	gateway => { status => 502, retry_after => '2' },
	gateway_timeout => { status => 504, retry_after => '2' },
	capped => { status => 503, retry_after => '3600' },
	# in milliseconds past 64 bits: 1.1 made 384 ms of the first
	huge => { status => 503, retry_after => '18446744073709552' },
	int64_max => { status => 503, retry_after => '9223372036854775807' },
);
$sink->paths(map { ("/$_" => { script => [ $case{$_} ] }) } keys %case);
$node->safe_psql('postgres',
	'INSERT INTO outbox_destinations (name, event_types, url) VALUES '
	  . join(', ', map { sprintf("('%s', '%s.*', '%s')", $_, $_, $sink->url("/$_")) } sort keys %case));

# Sends one event of case $name; returns the gap in seconds between its two
# requests once it is delivered.
sub gap_of
{
	my ($name) = @_;
	my ($id) = @{ emit($node, 'postgres', "$name.created", 1) };
	ok( $node->poll_query_until('postgres',
			"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$id'"),
		"$name: delivered");
	is( $node->safe_psql('postgres',
			"SELECT attempts, last_error IS NULL, dead_at IS NULL FROM outbox WHERE event_id = '$id'"),
		'2|t|t', "$name: after 2 attempts");
	my $requests = $sink->requests("/$name");
	is(join(',', map { $_->{status} } @$requests), "$case{$name}{status},200",
		"$name: answered $case{$name}{status}, then 200");
	my @headers = grep { defined } map { $_->{headers}{'webhook-id'} } @$requests;
	is(scalar(grep { $_ ne $id } @headers), 0, "$name: both requests for its event");
	my ($gap) = gaps($requests);
	diag(sprintf('%s: %d with Retry-After %s: next attempt %.2f s later',
		$name, $case{$name}{status},
		$case{$name}{retry_after} // "(HTTP-date $case{$name}{retry_after_in} s ahead)", $gap));
	return $gap;
}

# seconds
my $gap = gap_of('seconds');
cmp_ok($gap, '>=', 1.9, 'seconds: Retry-After: 2 waits at least 1.9 s, not the 100 ms backoff');
cmp_ok($gap, '<=', 2 + time_bound(1.5), 'seconds: and not much longer');

# HTTP-date: the sink rounds the date up to a whole second at least 3 s
# ahead, and the date's resolution is one second
$gap = gap_of('date');
cmp_ok($gap, '>=', 2.9, 'date: Retry-After as an HTTP-date waits until that date');
cmp_ok($gap, '<=', 4 + time_bound(1.5), 'date: and not much longer');

# a gateway's 502 and 504 (a proxy before the endpoint) honour it too
for my $name ('gateway', 'gateway_timeout')
{
	$gap = gap_of($name);
	cmp_ok($gap, '>=', 1.9, "$name: Retry-After: 2 waits at least 1.9 s");
	cmp_ok($gap, '<=', 2 + time_bound(1.5), "$name: and not much longer");
}

# a 500 does not honour Retry-After: the backoff applies (50 to 100 ms)
$gap = gap_of('ignored');
cmp_ok($gap, '<', time_bound(1.5), 'ignored: a 500 with Retry-After: 3600 is retried on the backoff');

# capped by outbox.backoff_max (a restart applies it before the request)
$node->append_conf('postgresql.conf', "outbox.backoff_max = '1s'\n");
$node->restart;
$pid = wait_relay($node, 'postgres');
is($node->safe_psql('postgres', 'SHOW outbox.backoff_max'), '1s', 'backoff_max is now 1 s');
$gap = gap_of('capped');
cmp_ok($gap, '>=', 0.9, 'capped: Retry-After: 3600 waits backoff_max');
cmp_ok($gap, '<=', 1 + time_bound(1.5), 'capped: about a second, not an hour');
for my $name ('huge', 'int64_max')
{
	$gap = gap_of($name);
	cmp_ok($gap, '>=', 0.9, "$name: Retry-After: $case{$name}{retry_after} waits backoff_max");
	cmp_ok($gap, '<=', 1 + time_bound(1.5), "$name: about a second");
}
is(relay_pid($node, 'postgres'), $pid, 'the same relay since the restart');

$sink->stop;
$node->stop;
done_testing();

# A 4xx answer says the request itself is wrong: the same request would fail
# again, so the event is dead-lettered at once, after one attempt, with the
# status in last_error. The 4xx that mean "not now" (408 Request Timeout,
# 409 Conflict, 425 Too Early, 429 Too Many Requests) are retried like a
# 5xx, and so is any 4xx for a destination with retry_client_errors = true.
#
# Each case has its own destination and sink path. A retried case answers
# its status once, then 200: exactly 2 requests, 2 attempts, delivered.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('client_errors');
my $sink = start_sink();
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

# name => [status, retry_client_errors, expected: dead or retried]
my %case = (
	s400 => [ 400, 'false', 'dead' ],
	s404 => [ 404, 'false', 'dead' ],
	s422 => [ 422, 'false', 'dead' ],
	s408 => [ 408, 'false', 'retried' ],
	s409 => [ 409, 'false', 'retried' ],
	s425 => [ 425, 'false', 'retried' ],
	s429 => [ 429, 'false', 'retried' ],
	s400_retry => [ 400, 'true', 'retried' ],
	s404_retry => [ 404, 'true', 'retried' ],
);
my @names = sort keys %case;

$sink->paths(map { ("/$_" => { script => [ { status => $case{$_}[0] } ] }) } @names);
$node->safe_psql('postgres',
	'INSERT INTO outbox_destinations (name, event_types, url, retry_client_errors) VALUES '
	  . join(', ', map { sprintf("('%s', '%s.*', '%s', %s)", $_, $_, $sink->url("/$_"), $case{$_}[1]) } @names));
is( $node->safe_psql('postgres', q{
		SELECT string_agg(name || '=' || retry_client_errors, ' ' ORDER BY name) FROM outbox_destinations
		 WHERE retry_client_errors}),
	's400_retry=true s404_retry=true', 'retry_client_errors is a column of outbox_destinations');

my %id;
$id{$_} = emit($node, 'postgres', "$_.created", 1)->[0] for @names;

# everything settles: delivered or dead
my $all = join(', ', map { "'$_'" } values %id);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM outbox WHERE event_id IN ($all) AND delivered_at IS NULL AND dead_at IS NULL"),
	'every event is delivered or dead-lettered');

for my $name (@names)
{
	my ($status, $retry, $expect) = @{ $case{$name} };
	my $what = "$status" . ($retry eq 'true' ? ' with retry_client_errors' : '');
	my ($attempts, $dead, $delivered, $error) = split /\|/, $node->safe_psql('postgres', qq{
		SELECT attempts, dead_at IS NOT NULL, delivered_at IS NOT NULL, coalesce(last_error, '')
		  FROM outbox WHERE event_id = '$id{$name}'});
	my $requests = $sink->requests("/$name");
	if ($expect eq 'dead')
	{
		is("$attempts|$dead|$delivered", '1|t|f', "$what: dead-lettered after 1 attempt");
		like($error, qr/^HTTP status $status\b/, "$what: last_error starts with HTTP status $status");
		is(scalar @$requests, 1, "$what: 1 request");
	}
	else
	{
		is("$attempts|$dead|$delivered", '2|f|t', "$what: retried, delivered by attempt 2");
		is(scalar @$requests, 2, "$what: 2 requests");
		is(join(',', map { $_->{status} } @$requests), "$status,200", "$what: answered $status, then 200");
	}
	is(scalar(grep { $_->{webhook_id} ne $id{$name} } @$requests), 0, "$what: every request for its event");
}

# a dead-lettered client error comes back with outbox_redeliver and is
# delivered once the endpoint accepts it
is($node->safe_psql('postgres', "SELECT outbox_redeliver('$id{s400}')"), 't', '400: redelivered');
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL AND attempts = 2 FROM outbox WHERE event_id = '$id{s400}'"),
	'400: delivered by the redelivery');
is(relay_pid($node, 'postgres'), $pid, 'the same relay throughout');

$sink->stop;
$node->stop;
done_testing();

# A 2xx status line means delivered, whatever the body does afterwards: the
# outcome is recorded as soon as the headers are in, even when the body
# drips one byte per 500 ms (40 bytes, 20 s) or never ends (chunked, one
# byte per 500 ms). The relay closes such a transfer by its time limit
# (timeout_ms = 3000 here) at the latest, also when it has nothing else to
# do, without turning the delivery into a failure or a retry, and other
# events are not held up meanwhile.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

my $node = outbox_node('drip');
my $sink = start_sink();
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

$sink->paths(
	'/drip' => { drip_ms => 500, drip_bytes => 40 },
	'/endless' => { drip_ms => 500 });
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url, timeout_ms) VALUES
	    ('drip', 'drip.*', '%s', 3000),
	    ('endless', 'endless.*', '%s', 3000),
	    ('fast', 'fast.*', '%s', NULL)},
	$sink->url('/drip'), $sink->url('/endless'), $sink->url('/fast')));

my %id;
($id{drip}) = @{ emit($node, 'postgres', 'drip.created', 1) };
($id{endless}) = @{ emit($node, 'postgres', 'endless.created', 1) };

for my $path ('drip', 'endless')
{
	ok( $node->poll_query_until('postgres',
			"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$id{$path}'"),
		"$path: marked delivered");
}
# the bodies are still coming: another event goes through meanwhile (sent
# now, before the checks below use up the time the drips last)
my ($fast) = @{ emit($node, 'postgres', 'fast.created', 1) };
for my $path ('drip', 'endless')
{
	my ($req) = @{ $sink->requests("/$path") };
	my $lag = $node->safe_psql('postgres',
		"SELECT extract(epoch FROM delivered_at) - $req->{received_at} FROM outbox WHERE event_id = '$id{$path}'");
	note(sprintf('%s: marked delivered %.2f s after the request arrived', $path, $lag));
	cmp_ok($lag, '<', 2.5, "$path: recorded before the time limit, while the body was still coming");
}

ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$fast'"),
	'another event is delivered while the bodies drip');
my $fast_at = $node->safe_psql('postgres',
	"SELECT extract(epoch FROM delivered_at) FROM outbox WHERE event_id = '$fast'");

# no second request, no failure: one attempt, delivered
for my $path ('drip', 'endless')
{
	is($sink->stats("/$path")->{arrived}, 1, "$path: exactly 1 request");
	is( $node->safe_psql('postgres', qq{
			SELECT attempts, delivered_at IS NOT NULL, last_error IS NULL, dead_at IS NULL, NOT (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts))
			  FROM outbox WHERE event_id = '$id{$path}'}),
		'1|t|t|t|t', "$path: delivered after 1 attempt, no error");
}

# The time limit covers the whole transfer, also after the outcome was
# recorded and when the relay has nothing else to do: it closes both
# connections by 3 s after the request (10 s allows for a loaded machine),
# not after 20 s (or never). Waits up to 15 s after the requests for that.
my @reqs = map { @{ $sink->requests("/$_") } } 'drip', 'endless';
my $deadline = $reqs[0]{received_at} + 15;
wait_until(sub {
	@reqs = map { @{ $sink->requests("/$_") } } 'drip', 'endless';
	return (2 == grep { defined $_->{ended} } @reqs) || Time::HiRes::time() > $deadline;
});
for my $req (@reqs)
{
	my $path = substr($req->{path}, 1);
	my $span = ($req->{ended_at} // Time::HiRes::time()) - $req->{received_at};
	note(sprintf('%s: the transfer %s after %.2f s', $path,
		defined $req->{ended} ? "ended ($req->{ended})" : 'was still open', $span));
	is($req->{ended} // 'open', 'aborted', "$path: the relay closed the connection before the body's end");
	cmp_ok($span, '<', 10, "$path: closed by the time limit (3 s), not read to the end");
}
# compared with the transfers' ends, not checked at a moment: a loaded
# machine may take longer than the drips to deliver the other event
is((grep { defined $_->{ended_at} && $_->{ended_at} > $fast_at } @reqs), 2,
	'both bodies were still being sent when the other event was delivered');
is($sink->stats("/$_")->{arrived}, 1, "$_: still exactly 1 request") for 'drip', 'endless';
is(relay_pid($node, 'postgres'), $pid, 'the same relay throughout');

$sink->stop;
$node->stop;
done_testing();

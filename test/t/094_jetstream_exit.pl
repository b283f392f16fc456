# A relay that stops while it publishes to JetStream: its connections
# (one over TLS, one plain) are closed before the process runs its exit
# handlers, which free OpenSSL's state that libnats's threads would still
# use; a connection that cannot close in time (still connecting) makes the
# process skip those handlers. Eight fast shutdowns in the middle of a
# flow: each relay ends without a crash, and every event is in its stream
# exactly once (resends carry the same Nats-Msg-Id). The sanitizer run
# (ci/sanitize.sh) checks the exits for memory errors. While it publishes,
# every thread of the relay but its own (libnats's and the connections')
# has the signals PostgreSQL handles blocked, so that no handler runs on a
# thread that must not call into PostgreSQL.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxNats;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $certs = make_certificates('outbox');
my $tls = start_nats(tls => $certs);
$tls->add_stream('SECURE', 'secure.>');
my $plain = start_nats();
my $plain_url = $plain->plain_url;
$plain->add_stream('PLAIN', 'plain.>');

my $node = outbox_node('jsexit');
wait_relay($node, 'postgres');
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream, nats_ca_file) VALUES
	    ('tls', 'exit.tls', 'tls://127.0.0.1:$tls->{port}', 'secure.exit', 'SECURE', '$certs->{ca}'),
	    ('plain', 'exit.plain', '$plain_url', 'plain.exit', 'PLAIN', NULL);
});

# The signals a thread blocks, from /proc (SigBlk: bit n-1 for signal n).
# A thread that ended since its task was listed has no status: undef.
sub blocked
{
	my ($status) = @_;
	open(my $fh, '<', $status) or return undef;
	my ($hex) = do { local $/; <$fh> } =~ /^SigBlk:\s*([0-9a-f]+)/m;
	return undef unless defined $hex;
	my $mask = hex(substr($hex, -8));
	return { map { $_ => ($mask >> ($_ - 1)) & 1 } (1, 2, 3, 10, 12, 14, 15) };
}

my $rounds = 8;
my $per_round = 2000;
for my $round (1 .. $rounds)
{
	my $before = $node->safe_psql('postgres',
		'SELECT count(*) FROM outbox WHERE delivered_at IS NOT NULL');
	$node->safe_psql('postgres', qq{
		SELECT outbox_emit(CASE WHEN g % 2 = 0 THEN 'exit.tls' ELSE 'exit.plain' END, jsonb_build_object('n', g))
		  FROM generate_series(1, $per_round) g});
	# stop while publishes are under way on both connections
	ok( $node->poll_query_until('postgres', qq{
			SELECT count(*) FILTER (WHERE event_type = 'exit.tls') > 0
			   AND count(*) FILTER (WHERE event_type = 'exit.plain') > 0
			   AND count(*) > $before + 100
			  FROM outbox WHERE delivered_at IS NOT NULL}),
		"round $round: both destinations deliver");
	if ($round == 1)
	{
		my $pid = relay_pid($node, 'postgres');
		my @threads = grep { $_ != $pid } map { m{/(\d+)$} ? $1 : () } glob("/proc/$pid/task/*");
		ok(@threads >= 2, 'the relay has libnats threads (' . scalar(@threads) . ')');
		my @open = grep { my $b = blocked("/proc/$pid/task/$_/status"); $b && grep { !$_ } values %$b }
		  @threads;
		is(scalar(@open), 0, 'every other thread blocks SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM and SIGTERM');
		ok(!blocked("/proc/$pid/task/$pid/status")->{15}, 'the relay itself takes SIGTERM');
	}
	$node->stop('fast');
	$node->start;
	wait_relay($node, 'postgres');
}
ok( $node->poll_query_until('postgres',
		'SELECT count(*) = 0 FROM outbox WHERE delivered_at IS NULL', 't'),
	'every event delivered after the last restart');
is($tls->count('SECURE'), $rounds * $per_round / 2, 'the TLS stream holds each of its events once');
is($plain->count('PLAIN'), $rounds * $per_round / 2, 'the plain stream holds each of its events once');

is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL OR cut_off_attempts > 0'),
	'0', 'no event held responsible for the stops: none dead-lettered, none cut off in a row');

my $log = slurp_file($node->logfile);
# a connection still being made (a TLS handshake on a loaded machine) may
# outlive the 500 ms a relay waits; that relay exits without the libraries'
# exit handlers, which is what the sanitizer run checks then
note(sprintf('%d of %d relays left a connection closing at exit',
	scalar(() = $log =~ /did not close within/g), $rounds));
is(scalar(() = $log =~ /terminated by signal|was terminated by exception/g), 0, 'no relay crashed');
is(scalar(() = $log =~ /outbox relay started for database "postgres"/g), $rounds + 1,
	'one relay per start');

done_testing();

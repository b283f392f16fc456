# Shared helpers of the TAP tests: a cluster with the extension preloaded,
# the relay workers seen from pg_stat_activity, events, the server log, and
# the webhook sink of test/sink.py on 127.0.0.1. Every helper takes the node
# (and database) it works on as arguments.
package OutboxTest;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use File::Basename qw(dirname);
use File::Spec;
use HTTP::Tiny;
use IPC::Run ();
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(outbox_node require_kind start_sink make_certificates wait_until poll_after_crash relay_pid wait_relay
  wait_no_relay wait_idle_passes set_databases emit log_since error_lines
  count_by_id check_repeats relay_warnings gaps start_listener readme_sql
  poison_scenario time_bound kind_check_module node_json in_flight_sample);

my $test_dir = File::Spec->rel2abs(dirname(__FILE__) . '/..');

# Samples the journal of $node's database postgres every 20 ms for
# $seconds: returns the number of samples, the most events of type $type
# in flight at once, and the age in seconds of the oldest claim. Each
# sample is one statement: the events still in flight by the journal (a
# row per claim, with the attempt count each event was claimed at: one
# whose outcome is recorded has moved past it), and the oldest claim's age,
# both by the server's clock.
sub in_flight_sample
{
	my ($node, $type, $seconds) = @_;
	my $sql = qq{
		SELECT (SELECT count(*)
		          FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts)
		          JOIN outbox o ON o.id = f.id AND o.attempts = f.attempts
		         WHERE o.event_type = '$type' AND o.delivered_at IS NULL),
		       coalesce((SELECT extract(epoch FROM max(clock_timestamp() - j.claimed_at))
		                   FROM outbox_in_flight j), 0)};
	my ($samples, $most, $oldest) = (0, 0, 0);
	my $until = time() + $seconds;
	while (time() < $until)
	{
		my ($n, $age) = split /\|/, $node->safe_psql('postgres', $sql);
		$samples++;
		$most = $n if $n > $most;
		$oldest = $age if $age > $oldest;
		usleep(20_000);
	}
	return ($samples, $most, $oldest);
}

# Runs test/$script (a Node.js reader) with $input (a hash) as JSON on its
# stdin, with the npm packages ci/deps.sh installs (test/node/package.json)
# on NODE_PATH, and returns its JSON output decoded. Dies, naming them, if
# the packages @$packages are not installed, or if the script fails.
sub node_json
{
	my ($script, $input, @packages) = @_;
	my $modules = ($ENV{OUTBOX_NODE_DIR} // '/var/cache/outbox-npm') . '/node_modules';
	for my $p (@packages)
	{
		die "the npm package $p is not in $modules: run ci/deps.sh as root" unless -d "$modules/$p";
	}
	my ($out, $err) = ('', '');
	local $ENV{NODE_PATH} = $modules;
	IPC::Run::run([ 'node', "$test_dir/$script" ], '<', \JSON::PP::encode_json($input),
		'>', \$out, '2>', \$err)
	  or die "$script: $err";
	return JSON::PP::decode_json($out);
}

# Builds test/kind_check.c, a module of test functions for the kind
# interface, against the installed server's headers and this tree's src/,
# and returns the path of the shared library (in a fresh temporary
# directory). Dies if it does not build.
sub kind_check_module
{
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $includes = `pg_config --includedir-server`;
	chomp $includes;
	my ($out, $err) = PostgreSQL::Test::Utils::run_command([ $ENV{CC} // 'cc', '-shared', '-fPIC',
		'-O1', "-I$includes", "-I$test_dir/../src", '-o', "$dir/kind_check.so",
		"$test_dir/kind_check.c" ]);
	die "cannot build test/kind_check.c: $err" unless -f "$dir/kind_check.so";
	return "$dir/kind_check.so";
}

# Skips the whole test file when the installed build left kind out (make
# with_<kind>=no): the Makefile lists such kinds in OUTBOX_KINDS_LEFT_OUT.
sub require_kind
{
	my ($kind) = @_;
	plan skip_all => "this build of outbox has no $kind kind (make with_$kind=no)"
	  if grep { $_ eq $kind } split ' ', ($ENV{OUTBOX_KINDS_LEFT_OUT} // '');
	return;
}

# A started node with outbox preloaded and created in database postgres
# (in schema $conf{schema} if given, else in public). %conf: extra
# postgresql.conf lines, name => value.
sub outbox_node
{
	my ($name, %conf) = @_;
	my $schema = delete $conf{schema};
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => delete $conf{allows_streaming} // 0);
	my %settings = (
		shared_preload_libraries => "'outbox'",
		'outbox.databases' => "'postgres'",
		'outbox.backoff_base' => "'100ms'",
		'outbox.poll_interval' => "'200ms'",
		max_worker_processes => 16,
		%conf);
	$node->append_conf('postgresql.conf',
		join('', map { "$_ = $settings{$_}\n" } sort keys %settings));
	$node->start;
	$node->safe_psql('postgres', $schema
		? "CREATE SCHEMA $schema; CREATE EXTENSION outbox SCHEMA $schema"
		: 'CREATE EXTENSION outbox');
	return $node;
}

# A bound in seconds on the relay's own work (e.g. how soon SIGTERM ends
# it): $seconds, or three times that under the sanitizer run, whose
# instrumented library runs several times slower on a loaded machine.
sub time_bound
{
	my ($seconds) = @_;
	return $ENV{OUTBOX_TEST_SANITIZER} ? 3 * $seconds : $seconds;
}

# Polls $cond (a sub) until it returns true, up to the default timeout;
# returns whether it did. For conditions outside the database.
sub wait_until
{
	my ($cond) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 1 if $cond->();
		usleep(50_000);
	}
	return 0;
}

my $relay_of = "FROM pg_stat_activity WHERE backend_type = 'outbox relay'";

# The pid of the relay of database $db on $node, '' if none runs.
sub relay_pid
{
	my ($node, $db) = @_;
	return $node->safe_psql('postgres', "SELECT pid $relay_of AND datname = '$db'");
}

# Waits until $node accepts connections (pg_isready); false on timeout.
sub wait_ready
{
	my ($node) = @_;
	return wait_until(sub {
		IPC::Run::run([ $node->installed_command('pg_isready'), '-q',
			  '-h', $node->host, '-p', $node->port ], '>', \my $out, '2>', \my $err);
	});
}

# poll_query_until($db, $query) of $node, robust to a crash restart: while
# the server recovers, psql is refused before it reads the query from its
# stdin, and IPC::Run dies of the broken pipe instead of letting
# poll_query_until try again. Waits for the server to accept connections,
# and starts again after such a death (the kill may be seen only later).
sub poll_after_crash
{
	my ($node, $db, $query) = @_;
	for my $try (1 .. 5)
	{
		my $ok = eval { wait_ready($node) && $node->poll_query_until($db, $query) };
		return $ok unless $@;
		die $@ unless $@ =~ /Broken pipe/;
	}
	return 0;
}

# Waits until exactly one relay runs in $db, not $old_pid if given; returns its pid, undef on timeout.
sub wait_relay
{
	my ($node, $db, $old_pid) = @_;
	my $cond = "datname = '$db'" . (defined $old_pid ? " AND pid <> $old_pid" : '');
	return undef
	  unless poll_after_crash($node, 'postgres', "SELECT count(*) = 1 $relay_of AND $cond");
	return $node->safe_psql('postgres', "SELECT pid $relay_of AND $cond");
}

# Waits until no relay runs in $db; returns whether that happened before the timeout.
sub wait_no_relay
{
	my ($node, $db) = @_;
	return poll_after_crash($node, 'postgres', "SELECT count(*) = 0 $relay_of AND datname = '$db'");
}

# Waits until relay $pid, the same process, runs passes $secs s after now; false if it exits.
sub wait_idle_passes
{
	my ($node, $pid, $secs) = @_;
	my $t0 = $node->safe_psql('postgres', 'SELECT now()');
	my $state = '';
	wait_until(sub {
		$state = $node->safe_psql('postgres', qq{
			SELECT CASE WHEN count(*) = 0 THEN 'gone'
			            WHEN bool_and(state_change > '$t0'::timestamptz + interval '$secs s') THEN 't'
			            ELSE 'f' END
			  FROM pg_stat_activity WHERE pid = $pid});
		return $state ne 'f';
	});
	diag($state eq 'gone' ? "relay $pid exited" : "relay $pid ran no pass after the first $secs s")
	  unless $state eq 't';
	return $state eq 't';
}

# Sets outbox.databases of $node to $list (ALTER SYSTEM) and reloads it.
sub set_databases
{
	my ($node, $list) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET outbox.databases = '$list'");
	$node->reload;
}

# Emits $n events of type $type in one transaction in $db; returns a reference to their event_ids.
sub emit
{
	my ($node, $db, $type, $n) = @_;
	return [ split /\n/, $node->safe_psql($db,
		"SELECT outbox_emit('$type', jsonb_build_object('n', g)) FROM generate_series(1, $n) g") ];
}

# What $node wrote to its server log from byte $offset on.
sub log_since
{
	my ($node, $offset) = @_;
	return slurp_file($node->logfile, $offset);
}

# The ERROR, FATAL and PANIC lines of log text $text, without statements echoed by log_statement.
sub error_lines
{
	my ($text) = @_;
	return grep { /\b(?:ERROR|FATAL|PANIC):\s/ && !/\bLOG:\s+statement:/ } split /\n/, $text;
}

# Counts the requests in list $requests (from the sink) per webhook-id.
sub count_by_id
{
	my ($requests) = @_;
	my %n;
	$n{ $_->{webhook_id} }++ for @$requests;
	return \%n;
}

# After a crash, checks which events of $type on $node were sent again
# ($requests: the sink's requests for them, each a first attempt or a
# repeat). An event whose repeated attempt was counted (attempts = 2) had
# its journal row released by the new relay: at most $released of them. One
# with attempts = 1 lost its journal row with its claim's commit, flushed up
# to a millisecond after the claim's requests went out (docs/delivery.md,
# "No transaction over the network"): at most $conns of them
# (outbox.http_max_connections), each first sent by the old relay, before
# $restarted_at (when the new relay ran). No event is sent more than twice.
# Four tests, named after $part; returns the number of repeats.
sub check_repeats
{
	my ($node, $part, $type, $requests, $released, $conns, $restarted_at) = @_;
	my %attempts = split /[|\n]/, $node->safe_psql('postgres',
		"SELECT event_id, attempts FROM outbox WHERE event_type = '$type'");
	my %sent = %{ count_by_id($requests) };
	my %first;
	for my $r (sort { $a->{received_at} <=> $b->{received_at} } @$requests)
	{
		$first{ $r->{webhook_id} } //= $r->{received_at};
	}
	my @again = grep { $sent{$_} > 1 } keys %sent;
	my @lost = grep { $attempts{$_} == 1 } @again;
	note(sprintf('%s: %d events sent again, %d of them had lost their journal row with its claim\'s commit',
		$part, scalar @again, scalar @lost));
	cmp_ok(@again - @lost, '<=', $released,
		"$part: only events in flight at the crash were sent again (released by the new relay)");
	cmp_ok(scalar @lost, '<=', $conns, "$part: journal rows lost with an unflushed claim: at most one claim's requests");
	is(scalar(grep { $first{$_} >= $restarted_at } @lost), 0,
		"$part: and each of those was first sent before the restart");
	is(scalar(grep { $sent{$_} > 2 } @again), 0, "$part: no event was sent more than twice");
	return scalar @again;
}

# The lines of the server log of $node from byte $offset on in which the
# relay reports an error it caught and went on ("outbox relay could not ...").
sub relay_warnings
{
	my ($node, $offset) = @_;
	return grep { /WARNING:  outbox relay could not / } split /\n/, log_since($node, $offset);
}

# The gaps in seconds between successive arrivals of the requests in list
# $requests (from the sink), in arrival order.
sub gaps
{
	my ($requests) = @_;
	my @t = sort { $a <=> $b } map { $_->{received_at} } @$requests;
	return map { $t[$_] - $t[ $_ - 1 ] } 1 .. $#t;
}

# The ```sql block of the documentation that contains $text, so that a test
# runs the very code the documentation gives: the first such block of
# README.md, else of the docs/*.md files in name order; dies if there is none.
sub readme_sql
{
	my ($text) = @_;
	my $docs = "$test_dir/../docs";
	my @files = ("$test_dir/../README.md");
	if (opendir(my $dh, $docs))
	{
		push @files, map { "$docs/$_" } sort grep { /\.md\z/ } readdir $dh;
		closedir $dh;
	}
	for my $file (@files)
	{
		my $doc = slurp_file($file);
		for my $block ($doc =~ /^```sql\n(.*?)^```$/msg)
		{
			return $block if index($block, $text) >= 0;
		}
	}
	die "neither README.md nor docs/*.md has an sql block with \"$text\"";
}

# The scenario of a user trigger on outbox that raises for three poison
# events among 60 good ones (012 and 013 tell what each poison stands for):
# on a node called $name, $create_trigger creates trigger "poison" running
# function poison(), which returns $returns and raises "... $refused".
# Every check is a test of the calling file.
sub poison_scenario
{
	my ($name, $create_trigger, $returns, $refused) = @_;
	my $max_attempts = 3;
	my $node = outbox_node($name, 'outbox.max_attempts' => $max_attempts);
	my $sink = start_sink();
	my $url = $sink->url('/hook');

	my $pid = wait_relay($node, 'postgres');
	ok($pid, 'relay runs');

	$node->safe_psql('postgres', qq{
		INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hook', 'task.*', '$url');
		INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('note', 'note.*', 'poison_notes');
		CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS \$\$
		BEGIN
			IF NEW.payload ? 'poison' THEN
				RAISE EXCEPTION 'poison event % $refused', NEW.payload->>'poison';
			END IF;
			IF NEW.payload ? 'poison_mark' AND NEW.delivered_at IS NOT NULL THEN
				RAISE EXCEPTION 'delivery mark of % $refused', NEW.payload->>'poison_mark';
			END IF;
			RETURN $returns;
		END \$\$;
		$create_trigger
	});

	# 60 good events with the three poisons among them, in one transaction
	my $listener = start_listener($node, 'postgres', 'poison_notes');
	my $log_offset = -s $node->logfile;
	my $t0 = time;
	my ($any_poison, $mark_poison, $claim_poison);
	my @good;
	my @lines = split /\n/, $node->safe_psql('postgres', q{
		SELECT outbox_emit(CASE g WHEN 63 THEN 'note.created' ELSE 'task.created' END,
		       CASE g WHEN 20 THEN '{"poison": "A"}' WHEN 41 THEN '{"poison_mark": "B"}'
		              WHEN 63 THEN '{"poison": "C"}' ELSE jsonb_build_object('n', g) END)
		  FROM generate_series(1, 63) g ORDER BY g});
	($any_poison, $mark_poison, $claim_poison) = @lines[ 19, 40, 62 ];
	@good = @lines[ 0 .. 18, 20 .. 39, 41 .. 61 ];
	is(scalar @good, 60, '60 good events and 3 poisons emitted');

	my $good_list = join(', ', map { "'$_'" } @good);
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) = 60 FROM outbox WHERE event_id IN ($good_list) AND delivered_at IS NOT NULL"),
		'the 60 good events are marked delivered');
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) = 3 FROM outbox WHERE event_id IN ('$claim_poison', '$any_poison', '$mark_poison') AND dead_at IS NOT NULL"),
		'the three poisons are dead-lettered');
	my $elapsed = time - $t0;

	my $sent = count_by_id($sink->requests('/hook'));
	is_deeply([ grep { ($sent->{$_} // 0) != 1 } @good ], [], 'each good event was sent exactly once');
	is( $node->safe_psql('postgres', qq{
			SELECT count(*) FROM outbox
			 WHERE event_id IN ($good_list) AND attempts = 1 AND last_error IS NULL
			   AND dead_at IS NULL AND NOT (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts))}),
		'60', 'each good event: 1 attempt, no error, not in flight');

	# the claim poison: no claim including it committed, so it was never notified
	ok($listener->sync, 'the listener has every notification committed so far');
	is(scalar(grep { $_->{payload} =~ /\Q$claim_poison\E/ } @{ $listener->notes }), 0,
		'claim poison: never notified');
	my ($attempts, $error, $dest) = split /\|/, $node->safe_psql('postgres', qq{
		SELECT attempts, last_error, coalesce(destination, '') FROM outbox WHERE event_id = '$claim_poison'});
	is($attempts, $max_attempts, "claim poison: dead after $max_attempts attempts");
	like($error, qr/^could not claim the event: poison event C \Q$refused\E/,
		"claim poison: the trigger's message in last_error");
	$listener->quit;

	# the HTTP event refusing every update: sent, as its claim does not write
	# its row; each failure recorded with user triggers off
	is($sent->{$any_poison} // 0, $max_attempts, "any-update poison: sent $max_attempts times, once per attempt");
	($attempts, $error) = split /\|/, $node->safe_psql('postgres', qq{
		SELECT attempts, last_error FROM outbox WHERE event_id = '$any_poison'});
	is($attempts, $max_attempts, "any-update poison: dead after $max_attempts attempts");
	like($error, qr/^could not record the outcome: poison event A \Q$refused\E/,
		"any-update poison: the trigger's message in last_error");

	# the mark poison: sent, its mark refused, a failed attempt recorded instead
	is($sent->{$mark_poison} // 0, $max_attempts, "mark poison: sent $max_attempts times, once per attempt");
	($attempts, $error) = split /\|/, $node->safe_psql('postgres', qq{
		SELECT attempts, last_error FROM outbox WHERE event_id = '$mark_poison'});
	is($attempts, $max_attempts, "mark poison: dead after $max_attempts attempts");
	like($error, qr/^could not record the outcome: delivery mark of B \Q$refused\E/, "mark poison: the trigger's message in last_error");
	is( $node->safe_psql('postgres', qq{
			SELECT delivered_at IS NULL AND NOT (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts)) FROM outbox WHERE event_id = '$mark_poison'}),
		't', 'mark poison: not marked delivered, not in flight');

	# the same worker did all of it
	is(relay_pid($node, 'postgres'), $pid, 'the relay is the same process');
	my $log = log_since($node, $log_offset);
	unlike($log, qr/outbox relay started|exited with exit code/, 'no relay exit or restart in the log');
	my @warnings = relay_warnings($node, $log_offset);
	my $bound = 1 + int($elapsed / 10);
	note(sprintf('%d "outbox relay could not" lines in %.1f s', scalar @warnings, $elapsed));
	cmp_ok(scalar @warnings, '>=', 1, 'the caught error was logged');
	cmp_ok(scalar @warnings, '<=', $bound, "at most one such line per 10 s ($bound)");

	# the relay still delivers new events afterwards
	my ($later) = @{ emit($node, 'postgres', 'task.later', 1) };
	ok( $node->poll_query_until('postgres',
			"SELECT delivered_at IS NOT NULL AND attempts = 1 FROM outbox WHERE event_id = '$later'"),
		'a later event is delivered');
	is(relay_pid($node, 'postgres'), $pid, 'still the same relay');
	$sink->stop;
	$node->stop;
}

# A psql session of role $user (undef: the test's superuser) in database $db
# that LISTENs on $channel; returns an OutboxTest::Listener.
sub start_listener
{
	my ($node, $db, $channel, $user) = @_;
	my $psql = $node->background_psql($db,
		defined $user ? (extra_params => [ '-U', $user ]) : ());
	$psql->set_query_timer_restart;
	$psql->query_safe("LISTEN $channel");
	return bless { node => $node, db => $db, channel => $channel, psql => $psql, notes => [] },
	  'OutboxTest::Listener';
}

# Starts test/sink.py on a free port of 127.0.0.1; returns an OutboxTest::Sink.
# %opts: tls => { cert, key } (PEM files) for https.
sub start_sink
{
	my (%opts) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port_file = "$dir/port";
	my $pid = fork();
	die "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		exec('python3', "$test_dir/sink.py", '--port-file', $port_file,
			$opts{tls} ? ('--tls-cert', $opts{tls}{cert}, '--tls-key', $opts{tls}{key}) : ())
		  or die "exec python3: $!";
	}
	wait_until(sub { -s $port_file }) or die "sink did not start";
	# with tls, the https port, then a plain port for the control API
	my ($port, $control) = split ' ', PostgreSQL::Test::Utils::slurp_file($port_file);
	return bless { pid => $pid, base => "http://127.0.0.1:" . ($control // $port),
		url_base => ($opts{tls} ? 'https' : 'http') . "://127.0.0.1:$port" }, 'OutboxTest::Sink';
}

# A CA and a certificate for 127.0.0.1 signed by it, made with the openssl
# command line in a new directory: returns { ca, cert, key } (paths).
sub make_certificates
{
	my ($name) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my @openssl = ('openssl');
	for my $cmd (
		[ 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', "$dir/ca.key", '-out', "$dir/ca.pem",
			'-days', '2', '-subj', "/CN=$name test CA" ],
		[ 'req', '-newkey', 'rsa:2048', '-nodes', '-keyout', "$dir/server.key", '-out', "$dir/server.csr",
			'-subj', '/CN=127.0.0.1' ],
		[ 'x509', '-req', '-in', "$dir/server.csr", '-CA', "$dir/ca.pem", '-CAkey', "$dir/ca.key",
			'-CAcreateserial', '-out', "$dir/server.pem", '-days', '2', '-extfile', "$dir/san.cnf" ])
	{
		if ($cmd->[0] eq 'x509')
		{
			open my $fh, '>', "$dir/san.cnf" or die $!;
			print $fh "subjectAltName = IP:127.0.0.1, DNS:127.0.0.1, DNS:localhost\n";
			close $fh;
		}
		my ($out, $err) = ('', '');
		IPC::Run::run([ @openssl, @$cmd ], '>', \$out, '2>', \$err) or die "openssl @$cmd: $err";
	}
	return { ca => "$dir/ca.pem", cert => "$dir/server.pem", key => "$dir/server.key" };
}

package OutboxTest::Listener;

my $markers = 0;

# Runs $sql in the listener's session; keeps the notifications psql printed
# after it (in $self->{notes}: {channel, payload, pid}) and returns the rest
# of the output.
sub query
{
	my ($self, $sql) = @_;
	my $out = $self->{psql}->query_safe($sql);
	my @rest;
	for my $line (split /\n/, $out)
	{
		if ($line =~ /^Asynchronous notification "([^"]*)" with payload "(.*)" received from server process with PID (\d+)\.$/)
		{
			push @{ $self->{notes} }, { channel => $1, payload => $2, pid => $3 };
		}
		else
		{
			push @rest, $line;
		}
	}
	return join("\n", @rest);
}

# The notifications received so far, after collecting those waiting.
sub notes { my ($self) = @_; $self->query('SELECT 1'); return $self->{notes}; }

# Waits until every notification committed before now has been received
# (they arrive in commit order: a marker sent now comes after them).
sub sync
{
	my ($self) = @_;
	my $marker = 'marker-' . ++$markers;
	$self->{node}->safe_psql($self->{db}, "NOTIFY $self->{channel}, '$marker'");
	my $ok = OutboxTest::wait_until(sub { grep { $_->{payload} eq $marker } @{ $self->notes } });
	$self->{notes} = [ grep { $_->{payload} !~ /^marker-\d+$/ } @{ $self->{notes} } ];
	return $ok;
}

sub quit { my ($self) = @_; $self->{psql}->quit; }

package OutboxTest::Sink;

my $http = HTTP::Tiny->new(timeout => 30);

sub url { my ($self, $path) = @_; return $self->{url_base} . ($path // '/hook'); }

sub _call
{
	my ($self, $method, $path, $data) = @_;
	my $res = $http->request($method, $self->{base} . $path,
		defined $data
		? { content => JSON::PP::encode_json($data), headers => { 'content-type' => 'application/json' } }
		: {});
	die "sink $method $path: $res->{status} $res->{content}" unless $res->{success};
	return JSON::PP::decode_json($res->{content});
}

sub control  { my ($self, %rules) = @_; return $self->_call('POST', '/_control', \%rules); }
sub reset    { my ($self) = @_; return $self->_call('POST', '/_reset', {}); }
sub requests { my ($self, $path) = @_; return $self->_call('GET', '/_requests' . _only($path)); }
sub stats    { my ($self, $path) = @_; return $self->_call('GET', '/_stats' . _only($path)); }
sub arrivals { my ($self, $path) = @_; return $self->_call('GET', '/_arrivals' . _only($path)); }
sub _only    { my ($path) = @_; return defined $path ? "?path=$path" : ''; }

# Sets the rules of the given paths, replacing every path rule set before:
# $sink->paths('/slow' => { delay_ms => 2000 }, ...); see test/sink.py.
sub paths { my ($self, %rules) = @_; return $self->control(paths => \%rules); }

# The requests answered with 2xx, in arrival order.
sub delivered
{
	my ($self, $path) = @_;
	return [ grep { $_->{status} >= 200 && $_->{status} < 300 } @{ $self->requests($path) } ];
}

# The webhook-ids of the requests answered 2xx (to $path, if given), sorted.
sub delivered_ids
{
	my ($self, $path) = @_;
	return [ sort map { $_->{webhook_id} } @{ $self->delivered($path) } ];
}

# Waits until at least $n requests (to $path, if given) were answered 2xx.
sub wait_delivered
{
	my ($self, $n, $path) = @_;
	return OutboxTest::wait_until(sub { $self->stats($path)->{delivered} >= $n });
}

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'TERM', $self->{pid};
	waitpid($self->{pid}, 0);
	$self->{pid} = undef;
}

# at exit, the sink's end must not become the test's exit status
sub DESTROY { my ($self) = @_; local $?; $self->stop; }

1;

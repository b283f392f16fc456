# The relay's statements reach rows by key whatever the statistics of the
# outbox table say. Analyzed while empty (after a purge) or while nothing
# is pending (the steady state), the statistics make a sequential scan, or
# a walk of the pending index joined to every outcome of a batch, look
# cheapest; a generic plan built then would scan the whole backlog for
# every claim or batch of outcomes. The plans the relay actually runs are
# read from the server log (auto_explain, nested statements included):
# the claim and the next-due lookup walk outbox_pending_idx in its order
# (the claim leaving out the events in flight with a hashed subplan),
# outcomes and NOTIFY marks fetch rows by TID (one scan of a batch's TIDs,
# hash joined to its values), failures by primary key, the journal of
# events in flight by its primary key, the purge's batches by an index
# walk and TIDs, no relay statement scans the outbox table sequentially,
# and none is compiled by JIT. The server's
# plan_cache_mode = force_custom_plan, which would plan each execution
# afresh, does not apply to the relay, nor to outbox_relay() in a session.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('plans',
	shared_preload_libraries => "'outbox,auto_explain'",
	'auto_explain.log_min_duration' => 0,
	'auto_explain.log_nested_statements' => 'on',
	plan_cache_mode => 'force_custom_plan');
my $sink = start_sink();
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

$sink->paths('/fail' => { status => 503 });
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES
	    ('hook', 'hook.*', '%s'), ('fail', 'fail.*', '%s');
	INSERT INTO outbox_destinations (name, event_types, url, ordered) VALUES
	    ('ord', 'ord.*', '%s', true);
	INSERT INTO outbox_destinations (name, event_types, channel) VALUES
	    ('note', 'note.*', 'outbox_plans')},
	$sink->url('/hook'), $sink->url('/fail'), $sink->url('/ord')));

# Which statement a plan belongs to (by its text), and the access path it
# must use on the outbox table. Statements that join rows to a batch's
# arrays fetch them in one TID scan and hash join them: a nested loop
# would rescan by TID once per row, each rescan an lseek for the table's
# size.
my $tid_list = qr/Hash Join\b.*->  Tid Scan on outbox o\b[^\n]*\n\s*TID Cond: \(ctid = ANY \(\$1\)\)/s;
my @statements = (
	[ 'claim', qr/FOR UPDATE OF p SKIP LOCKED/,
	  qr/Index Scan using outbox_pending_idx on outbox o\b[^\n]*\n(?:\s+(?:Index Cond|Filter):[^\n]*\n)*\s+Filter: [^\n]*\bhashed SubPlan/ ],
	[ 'outcome', qr/FROM unnest\(\$1::tid\[\], \$2::bigint\[\], \$3::int\[\]/, $tid_list ],
	[ 'NOTIFY mark', qr/FROM unnest\(\$1::tid\[\], \$2::text\[\], \$3::text\[\]/, $tid_list ],
	[ 'journal end', qr/DELETE FROM \S+\.outbox_in_flight j/, qr/Index Scan using outbox_in_flight_pkey on outbox_in_flight j\b/ ],
	[ 'failure', qr/SET attempts = u\.attempts, last_error = u\.err/, qr/Index Scan using outbox_pkey on outbox o\b/ ],
	[ 'park', qr/SET next_attempt_at = now\(\) \+ least/, qr/Tid Scan on outbox o\b/ ],
	[ 'next due', qr/extract\(epoch FROM o\.next_attempt_at - now\(\)\)/, qr/Index Only Scan using outbox_pending_idx on outbox o\b/ ],
	[ 'hold', qr/SET held_by = v\.blocker/,
	  qr/\A(?=.*$tid_list)(?=.*Index Scan using outbox_pkey on outbox b\b)/s ],
	[ 'release', qr/SET held_by = NULL, next_attempt_at = now\(\)/,
	  qr/Index Scan using outbox_held_idx on outbox h\b/ ]);

# The plans process $who (default: the relay) logged in $text: [query
# text, plan text] each.
sub relay_plans
{
	my ($text, $who) = @_;
	$who //= $pid;
	my @plans;
	for my $entry (split /^(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \S+ \[\d+\])/m, $text)
	{
		next unless $entry =~ /^\S+ \S+ \S+ \[$who\] .*plan:\n/;
		my ($query, $plan) = $entry =~ /Query Text: ([^\n]*)\n(.*)\z/s or next;
		push @plans, [ $query, $plan ];
	}
	return @plans;
}

my $round = 0;
sub round
{
	my ($what, $stats_sql) = @_;
	$round++;
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', $stats_sql);
	note("$what: " . $node->safe_psql('postgres',
		"SELECT format('reltuples %s, relpages %s', reltuples, relpages) FROM pg_class WHERE relname = 'outbox'"));
	emit($node, 'postgres', "hook.r$round", 500);
	emit($node, 'postgres', "note.r$round", 50);
	emit($node, 'postgres', "fail.r$round", 5);
	emit($node, 'postgres', "nowhere.r$round", 5);
	# written while 'ord' is not ordered, so that they are not held as
	# they are written (src/emit_hold.c) and the claim holds them
	$node->safe_psql('postgres', qq{
		BEGIN;
		UPDATE outbox_destinations SET ordered = false WHERE name = 'ord';
		SELECT count(outbox_emit('ord.r$round', '{}', 'order', (i % 3)::text)) FROM generate_series(1, 30) i;
		UPDATE outbox_destinations SET ordered = true WHERE name = 'ord';
		COMMIT});
	ok( $node->poll_query_until('postgres', qq{
			SELECT count(*) FILTER (WHERE event_type IN ('hook.r$round', 'note.r$round', 'ord.r$round') AND delivered_at IS NOT NULL) = 580
			   AND count(*) FILTER (WHERE event_type = 'fail.r$round' AND attempts >= 2 AND NOT (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts))) = 5
			   AND count(*) FILTER (WHERE event_type = 'nowhere.r$round' AND last_error IS NOT NULL) = 5
			  FROM outbox}),
		"$what: events delivered, failed and parked");

	my @plans = relay_plans(log_since($node, $offset));
	for my $s (@statements)
	{
		my ($name, $text, $path) = @$s;
		my @mine = grep { $_->[0] =~ $text } @plans;
		ok(@mine > 0, "$what: the relay ran its $name statement");
		my @off = grep { $_->[1] !~ $path } @mine;
		is(scalar @off, 0, "$what: every $name plan uses the expected access path")
		  or diag("$name plan:\n$off[0][1]");
	}
	my @scans = grep { $_->[1] =~ /(?:Seq Scan|Bitmap Heap Scan) on outbox o\b/ } @plans;
	is(scalar @scans, 0, "$what: no relay statement scans the outbox table")
	  or diag("query: $scans[0][0]\nplan:\n$scans[0][1]");
}

# the table analyzed while empty: a sequential scan looks free
round('analyzed while empty', 'VACUUM ANALYZE outbox');

# the steady state: many rows, few pending, so the pending index looks
# nearly empty and walking it for every outcome looks cheap
emit($node, 'postgres', 'hook.bulk', 5000);
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM outbox WHERE event_type = 'hook.bulk' AND delivered_at IS NULL"),
	'a bulk of events delivered');
round('analyzed with few pending', 'ANALYZE outbox');

# outbox_relay() in a session with force_custom_plan (the server's here),
# in a database without a relay, its table analyzed while empty
$node->safe_psql('postgres', 'CREATE DATABASE manual');
$node->safe_psql('manual', sprintf(q{
	CREATE EXTENSION outbox;
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hook', 'hook.*', '%s');
	INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('note', 'note.*', 'outbox_plans');
	VACUUM ANALYZE outbox;}, $sink->url('/hook')));
emit($node, 'manual', 'hook.m', 50);
emit($node, 'manual', 'note.m', 10);
my $offset = -s $node->logfile;
my ($mode, $backend, $result, $after) = split /\n/, $node->safe_psql('manual', q{
	SHOW plan_cache_mode;
	SELECT pg_backend_pid();
	SELECT delivered || '/' || failed FROM outbox_relay(100);
	SHOW plan_cache_mode;});
is("$mode $result", 'force_custom_plan 60/0', 'outbox_relay() in a force_custom_plan session delivers the 60 events');
my @plans = relay_plans(log_since($node, $offset), $backend);
for my $s (grep { $_->[0] =~ /^(?:claim|outcome|NOTIFY mark)$/ } @statements)
{
	my ($name, $text, $path) = @$s;
	my @mine = grep { $_->[0] =~ $text } @plans;
	ok(@mine > 0, "outbox_relay(): it ran the $name statement");
	is(scalar(grep { $_->[1] !~ $path } @mine), 0, "outbox_relay(): its $name plan uses the expected access path");
}
is(scalar(grep { $_->[1] =~ /(?:Seq Scan|Bitmap Heap Scan) on outbox o\b/ } @plans), 0,
	'outbox_relay(): no statement scans the outbox table');
is($after, 'force_custom_plan', "the session's setting is as it was after the call");

is(relay_pid($node, 'postgres'), $pid, 'the same relay throughout');

# The purge, with statistics taken while every event was pending and the
# inbox was empty: each batch of delivered events walks
# outbox_delivered_idx within one destination and deletes by TID, the
# next destination is one probe of that index, and inbox rows go the same
# way through inbox_processed_at_idx. Batches of 500, so that a
# destination takes several, each after the last row of the one before.
set_databases($node, '');
ok(wait_no_relay($node, 'postgres'), 'the relay stops while the statistics are taken');
emit($node, 'postgres', 'hook.purge', 2000);
emit($node, 'postgres', 'note.purge', 600);
$node->safe_psql('postgres', q{
	DELETE FROM outbox WHERE event_type NOT LIKE '%.purge';
	VACUUM ANALYZE outbox;
	TRUNCATE inbox;
	ANALYZE inbox;
	INSERT INTO inbox (consumer, event_id, processed_at)
	SELECT 'c' || i % 3, gen_random_uuid(), now() - interval '1 day' + i * interval '1 ms'
	  FROM generate_series(1, 1200) AS i;});
$offset = -s $node->logfile;
$node->append_conf('postgresql.conf', q{
outbox.retention = 1
outbox.inbox_retention = 1
outbox.purge_batch_size = 500
outbox.purge_delay = 0
outbox.purge_interval = 100});
set_databases($node, 'postgres');
my $purger = wait_relay($node, 'postgres', $pid);
ok($purger, 'the relay starts again');
ok( $node->poll_query_until('postgres', q{
		SELECT NOT EXISTS (SELECT FROM outbox) AND NOT EXISTS (SELECT FROM inbox)}),
	'the relay delivers every event, then purges them and the inbox rows');
@plans = relay_plans(log_since($node, $offset), $purger);
for my $s (
	[ 'purge batch', qr/DELETE FROM \S+\.outbox o\s+WHERE o\.ctid = ANY/,
	  qr/\A(?=.*Tid Scan on outbox o\b)(?=.*Index Scan using outbox_delivered_idx on outbox p\b)/s ],
	[ 'next destination to purge', qr/SELECT min\(p\.destination\)/,
	  qr/Index Only Scan (?:Backward )?using outbox_delivered_idx on outbox p\b/ ],
	[ 'inbox purge batch', qr/DELETE FROM \S+\.inbox i\s+WHERE i\.ctid = ANY/,
	  qr/\A(?=.*Tid Scan on inbox i\b)(?=.*Index Scan using inbox_processed_at_idx on inbox q\b)/s ])
{
	my ($name, $text, $path) = @$s;
	my @mine = grep { $_->[0] =~ $text } @plans;
	ok(@mine > 1, "the relay ran its $name statement more than once");
	my @off = grep { $_->[1] !~ $path } @mine;
	is(scalar @off, 0, "every $name plan uses the expected access path")
	  or diag("$name plan:\n$off[0][1]");
}
is(scalar(grep { $_->[1] =~ /(?:Seq Scan|Bitmap Heap Scan) on (?:outbox|inbox) \w\b/ } @plans), 0,
	'no statement of the relay scans the outbox or inbox table');
is(scalar(grep { $_->[1] =~ /^\s*JIT:/m } @plans), 0, 'no statement of the relay is compiled by JIT');

$sink->stop;
$node->stop;
done_testing();

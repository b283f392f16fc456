# A dump and restore keeps every row, including rows that today's rules
# refuse but older versions allowed (and an upgrade keeps): here a pending
# event with a Cookie header and a destination with a 4-byte whsec_ key,
# written with the triggers off as an upgrade from 1.0 leaves them. The
# 1.1 triggers fire during the restore's COPY, which is all or nothing:
# they used to refuse such a row, which emptied the table, and the COPY's
# error context wrote the row (payload, header value, secret) to the log.
# Wanted: pg_restore and a plain dump through psql keep all rows, nothing
# secret reaches the log, and the relay deals with those rows when it
# claims them: each dead-lettered with a clear last_error. A writer's own
# COPY is still checked.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('restore', 'outbox.databases' => "''");
my $sink = start_sink();
my $url = $sink->url('/hook');
my $weak_url = $sink->url('/weak');

$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url, secret) VALUES
	    ('d1', 'ok.*', '$url', 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0'),
	    ('d2', 'two.*', '$url', NULL),
	    ('d3', 'three.*', '$url', NULL),
	    ('d4', 'four.*', '$url', NULL),
	    ('d5', 'five.*', '$url', NULL);
	SELECT outbox_emit('ok.x', jsonb_build_object('n', g, 'marker', 'PAYLOAD_MARKER'))
	  FROM generate_series(1, 8) g;
	-- what 1.0 allowed, written as an upgrade keeps it
	SET session_replication_role = replica;
	INSERT INTO outbox_destinations (name, kind, event_types, url, secret)
	    VALUES ('weak', 'http', 'weak.*', '$weak_url', 'whsec_YWJjZA');
	INSERT INTO outbox (event_type, payload, headers) VALUES
	    ('ok.cookie', '{"marker": "PAYLOAD_MARKER"}', '{"Cookie": "session=COOKIE_SECRET"}'),
	    ('weak.x', '{"marker": "PAYLOAD_MARKER"}', NULL);
});
my $rows = q{
	SELECT (SELECT count(*) FROM outbox) || ' ' || (SELECT count(*) FROM outbox_destinations)
	       || ' ' || (SELECT md5(string_agg(o::text, ',' ORDER BY id)) FROM outbox o)
	       || ' ' || (SELECT md5(string_agg(d::text, ',' ORDER BY name)) FROM outbox_destinations d)};
my $before = $node->safe_psql('postgres', $rows);
like($before, qr/^10 6 /, '10 events and 6 destinations to dump');

my $offset = -s $node->logfile;
my $dump = $node->basedir . '/outbox.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('postgres') ], 'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('restored'), $dump ],
	'pg_restore, stopping at any error');
is($node->safe_psql('restored', $rows), $before, 'pg_restore kept every row as it was');

my $plain = $node->basedir . '/outbox.sql';
$node->command_ok([ 'pg_dump', '-Fp', '-f', $plain, '-d', $node->connstr('postgres') ], 'plain pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored_plain');
$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('restored_plain'),
	'-f', $plain ], 'the plain dump through psql, stopping at any error');
is($node->safe_psql('restored_plain', $rows), $before, 'psql kept every row as it was');

my $log = log_since($node, $offset);
is(scalar(() = $log =~ /COOKIE_SECRET|YWJjZA|PAYLOAD_MARKER/g), 0,
	'no header value, secret or payload in the server log');

# a writer's COPY is checked as an INSERT is
$node->safe_psql('postgres', q{
	CREATE ROLE regress_app LOGIN IN ROLE outbox_writer;
	GRANT USAGE ON SCHEMA public TO regress_app});
my $csv = $node->basedir . '/events.csv';
open(my $fh, '>', $csv) or die;
print $fh qq{ok.copied,"{""a"": 1}","{""Cookie"": ""x""}"\n};
close($fh);
my ($rc, $out, $err) = $node->psql('postgres',
	"\\copy outbox (event_type, payload, headers) FROM '$csv' CSV",
	extra_params => [ '-U', 'regress_app' ]);
isnt($rc, 0, "a writer's COPY of an event with a Cookie header is refused");
like($err, qr/header/, 'with the header rule');
is($node->safe_psql('postgres', "SELECT count(*) FROM outbox WHERE event_type = 'ok.copied'"), '0',
	'and nothing of it is stored');

# the relay takes over the restored database: the rows that break a rule
# are dead-lettered, each with the reason; the others are delivered
set_databases($node, 'restored');
ok($node->poll_query_until('restored',
	"SELECT count(*) = 10 FROM outbox WHERE delivered_at IS NOT NULL OR dead_at IS NOT NULL"),
	'the relay settles every restored event');
is($node->safe_psql('restored', q{
	SELECT string_agg(event_type || ': ' || coalesce(last_error, 'delivered'), E'\n' ORDER BY id)
	  FROM outbox WHERE event_type <> 'ok.x'}),
	"ok.cookie: event header \"Cookie\" is not allowed\n"
	  . "weak.x: the destination's secret cannot be used to sign (see the rules for secrets)",
	'the event with a Cookie header and the one for the weak secret are dead-lettered, with the reason');
is($node->safe_psql('restored', "SELECT count(*) FROM outbox WHERE event_type = 'ok.x' AND delivered_at IS NOT NULL"),
	'8', 'the 8 others are delivered');
is($sink->stats('/weak')->{requests}, 0, 'nothing went out with the weak secret');
is(scalar(grep { ($_->{headers}{cookie} // '') ne '' } @{ $sink->requests('/hook') }), 0,
	'no Cookie header went out');

$sink->stop;
$node->stop;
done_testing();

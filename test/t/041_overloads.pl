# The owner of a database owns its schema public (PostgreSQL 15 and later),
# where the extension usually lives, and can create functions and
# operators there: overloads that make a call by name ambiguous, operators
# and functions named like pg_catalog's. Nothing the relay runs may resolve
# to them: the relay keeps delivering, in the same process, and so do
# outbox_relay() and outbox_status in a session.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('overloads', 'outbox.databases' => "'app'");
my $sink = start_sink();
my $url = $sink->url('/hook');

$node->safe_psql('postgres', q{
	CREATE ROLE app_owner LOGIN;
	CREATE ROLE ops LOGIN IN ROLE outbox_admin;
	CREATE DATABASE app OWNER app_owner;
});
$node->safe_psql('app', qq{
	CREATE EXTENSION outbox;
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hooks', 'hook.*', '$url');
	INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('notify', 'note.*', 'ch');
});
my $pid = wait_relay($node, 'app');
ok($pid, 'relay runs in app');

sub as_role
{
	my ($role, $sql) = @_;
	my ($ret, $out, $err) = $node->psql('app', $sql, extra_params => [ '-U', $role ]);
	return $ret == 0 ? $out : "ERROR: " . join(' ', $err =~ /ERROR:\s+(.*)/g);
}

# What the owner adds to public, each of which once broke a call by name or
# could capture one.
is( as_role('app_owner', q{
	CREATE FUNCTION public._outbox_like_pattern(pattern text, x text DEFAULT '') RETURNS text
		LANGUAGE sql IMMUTABLE AS $$ SELECT '%' $$;
	CREATE FUNCTION public._outbox_routes(event_type text, aggregate_type text,
		aggregate_id text, payload jsonb, destination_id bigint, x integer DEFAULT 0) RETURNS text
		LANGUAGE sql AS $$ SELECT 'captured' $$;
	CREATE FUNCTION public._outbox_routes(VARIADIC event_type text[]) RETURNS text
		LANGUAGE sql AS $$ SELECT 'captured' $$;
	CREATE FUNCTION public.now() RETURNS timestamptz
		LANGUAGE sql AS $$ SELECT timestamptz '2000-01-01 00:00:00+00' $$;
	CREATE FUNCTION public.never(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT false $$;
	CREATE OPERATOR public.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = public.never);
	CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.never);
	CREATE FUNCTION public.never_ts(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql AS $$ SELECT false $$;
	CREATE OPERATOR public.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.never_ts);
	SELECT 'created'}),
	'created', 'the owner of app creates overloads and operators in public');
like(as_role('app_owner', 'CREATE VIEW public._outbox_pending AS SELECT 1 AS id'),
	qr/already exists/, 'but cannot take the name of a relation the relay reads');
like(as_role('ops', "SELECT * FROM public._outbox_routes('hook.x', NULL, NULL, '{}'::jsonb, NULL::bigint)"),
	qr/is not unique/, 'a call of _outbox_routes by name is now ambiguous');

# A new relay prepares its statements with these in place.
my $offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
$pid = wait_relay($node, 'app', $pid);
ok($pid, 'a new relay starts');
$node->wait_for_log(qr/outbox relay started for database "app"/, $offset);

my $hooks = emit($node, 'app', 'hook.created', 3);
my $notes = emit($node, 'app', 'note.created', 2);
emit($node, 'app', 'nowhere.created', 1);
ok( $node->poll_query_until('app',
		"SELECT count(*) = 5 FROM outbox WHERE delivered_at IS NOT NULL"),
	'webhook and NOTIFY events are delivered');
is_deeply($sink->delivered_ids, [ sort @$hooks ], 'each webhook event once');
is( $node->safe_psql('app', q{
		SELECT string_agg(pg_catalog.format('%s:%s:%s', event_type, destination, attempts), ' ' ORDER BY id)
		  FROM outbox}),
	'hook.created:hooks:1 hook.created:hooks:1 hook.created:hooks:1 note.created:notify:1 note.created:notify:1 '
	  . 'nowhere.created::0',
	'routed by the extension\'s own functions');
ok( $node->poll_query_until('app', q{
		SELECT last_error = 'no enabled destination matches the event type' AND next_attempt_at > now()
		  FROM outbox WHERE event_type = 'nowhere.created'}),
	'the unroutable event is parked');
is(relay_pid($node, 'app'), $pid, 'by the same relay process');
my $log = log_since($node, $offset);
is( join("\n", grep { !/terminating background worker "outbox relay" due to administrator command/ }
		  error_lines($log)),
	'', 'no errors in the log');
unlike($log, qr/outbox relay could not/, 'no step of the relay failed');

# In a session of ops, with public on its search_path: outbox_status and
# outbox_relay() do not see the owner's objects either.
is( as_role('ops', q{
	BEGIN;
	INSERT INTO outbox (event_type, payload) VALUES ('hook.one', '{}'), ('note.two', '{}'), ('none.three', '{}');
	SELECT event_type, pending, unroutable FROM outbox_status ORDER BY 1;
	SELECT * FROM outbox_relay();
	SELECT string_agg(pg_catalog.format('%s:%s', event_type, destination), ' ' ORDER BY id)
	  FROM outbox WHERE delivered_at IS NOT NULL AND attempts = 1 AND created_at > now() - interval '1 minute'
	   AND event_type IN ('hook.one', 'note.two');
	ROLLBACK}),
	"hook.one|1|0\nnone.three|1|1\nnote.two|1|0\nnowhere.created|1|1\n2|0\nhook.one:hooks note.two:notify",
	'outbox_status and outbox_relay() in a session with public on its search_path');

$sink->stop;
$node->stop;
done_testing();

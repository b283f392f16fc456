# pg_dump keeps what users put in the extension's tables: pending and
# delivered events (with the identity sequence), destinations with their
# secrets (outbox_destination_secrets, restored after the destinations it
# references, its public_key computed again) and the inbox.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

# no relay in the databases used here: the rows must stay as they are
my $node = outbox_node('dump', 'outbox.databases' => "''");
$node->safe_psql('postgres', q{
	INSERT INTO outbox_destinations (name, event_types, url, secret)
	VALUES ('hook', 'task.*', 'http://127.0.0.1:1/hook', 'whsec_c2VjcmV0');
	SELECT outbox_add_secret('hook', 'whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=');
	UPDATE outbox_destination_secrets SET retire_at = '2030-01-01 00:00+00';
	SELECT outbox_emit('task.created', jsonb_build_object('n', i)) FROM generate_series(1, 5) i;
	UPDATE outbox SET delivered_at = now(), attempts = 1 WHERE id <= 2;
	SELECT inbox_accept('11111111-1111-1111-1111-111111111111', 'billing');
});
my $before = $node->safe_psql('postgres',
	q{SELECT string_agg(concat_ws('/', id, event_id, delivered_at IS NOT NULL, attempts), ',' ORDER BY id) FROM outbox});

my $dump = $node->basedir . '/outbox.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('postgres') ], 'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('restored'), $dump ], 'pg_restore');

is( $node->safe_psql('restored',
		q{SELECT string_agg(concat_ws('/', id, event_id, delivered_at IS NOT NULL, attempts), ',' ORDER BY id) FROM outbox}),
	$before, 'events restored with their ids, event_ids and state');
is($node->safe_psql('restored', q{SELECT name, secret FROM outbox_destinations}),
	'hook|whsec_c2VjcmV0', 'destination restored');
is( $node->safe_psql('restored',
		q{SELECT destination, secret, public_key, retire_at AT TIME ZONE 'UTC' FROM outbox_destination_secrets}),
	'hook|whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=|whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=|2030-01-01 00:00:00',
	'its added secret restored, with its public key and retire time');
is($node->safe_psql('restored', q{SELECT consumer FROM inbox}), 'billing', 'inbox restored');
$node->safe_psql('restored', q{SELECT outbox_emit('task.after', '{}')});
is($node->safe_psql('restored', q{SELECT max(id) FROM outbox}), '6',
	'the identity sequence continues after the restored events');

$node->stop;
done_testing();

# The destination-kind interface refuses a kind table that lacks a callback
# its send point requires, naming the kind and the callback, as PostgreSQL
# refuses an output plugin without a begin callback: test/kind_check.c,
# built here against the installed headers and this tree's src/, hands
# OutboxKindCheck (the check _PG_init runs on every kind built in) tables
# with one member left out, each required callback in turn, and formats it
# cannot carry. Every kind built in passed it: the server started.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $module = kind_check_module();

my $node = outbox_node('kinds');
$node->safe_psql('postgres', qq{
	CREATE FUNCTION kind_check(text) RETURNS text
	AS '$module', 'kind_check' LANGUAGE C STRICT});

sub check
{
	my ($variant) = @_;
	my ($rc, $stdout, $stderr) =
	  $node->psql('postgres', "SELECT kind_check('$variant')");
	return $rc == 0 ? $stdout : ($stderr =~ /ERROR:\s+(.*)/)[0];
}

is(check('after_commit'), 'ok', 'a complete after-commit kind passes');
is(check('at_commit'), 'ok', 'a complete at-commit kind passes');
my $prefix = 'outbox destination kind "test" has no';
for my $callback (qw(enqueue collect pending busy full timeout_ms abandon))
{
	is(check("without_$callback"), "$prefix $callback callback",
		"an after-commit kind without $callback is refused, kind and callback named");
}
is(check('without_send'), "$prefix send callback", 'an at-commit kind without send is refused');
for my $callback (qw(check_destination decode prepare))
{
	is(check("without_$callback"), "$prefix $callback callback", "every kind needs $callback");
}
is(check('sockets_only'), "$prefix socket_ready callback", 'sockets without socket_ready is refused');
is(check('ready_only'), "$prefix sockets callback", 'and socket_ready without sockets');
is(check('without_description'), "$prefix description", 'a kind without its description is refused');
is(check('without_target_column'), "$prefix target_column", 'or without its target column');
is(check('without_formats'), 'outbox destination kind "test" has no formats', 'or without formats');
is(check('unknown_format'),
	'outbox destination kind "test" lists format "protobuf", which this library does not have',
	'a format the library does not have is refused');
is(check('binary_without_binding'),
	'outbox destination kind "test" lists format "cloudevents-binary" but has no binding for its headers',
	'the binary mode needs the kind\'s CloudEvents protocol binding');

# the one-target rule names the target of every kind built in (the
# message itself names none, so that it does not change with the kinds)
my ($rc, $stdout, $stderr) = $node->psql('postgres', q{
	INSERT INTO outbox_destinations (name, event_types, url, channel)
	VALUES ('two', 'x.*', 'http://127.0.0.1:1/', 'c')});
like($stderr, qr/ERROR:\s+destination must have exactly one target/,
	'two targets are refused');
like($stderr,
	qr/DETAIL:\s+A destination is a webhook \(url\)(,| or) .*NOTIFY channel \(channel\).*(only one of them|not both)\./,
	'the detail names each kind with its target column');

$node->stop;
done_testing();

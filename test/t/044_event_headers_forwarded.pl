# Which of an event's headers reach an endpoint: a destination's
# event_headers. NULL forwards every header events may carry (as 1.1 did),
# an empty array none, otherwise the names and prefix-* patterns it lists,
# without case; the destination's own headers are sent whatever it says.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('event_headers');
my $sink = start_sink();
my $url = $sink->url('/hook');
ok(wait_relay($node, 'postgres'), 'relay runs');

my %lists = (all => 'NULL', none => q{'{}'}, tenant => q{'{X-Tenant}'}, envoy => q{'{x-envoy-*}'});
$node->safe_psql('postgres', join(';', map { qq{
	INSERT INTO outbox_destinations (name, event_types, url, headers, event_headers)
	VALUES ('$_', '$_.*', '$url', '{"x-dest": "$_"}', $lists{$_})} } sort keys %lists));

# headers an endpoint behind a proxy may take as trust or identity
my $headers = '{"x-is-admin": "true", "x-envoy-internal": "true", "x-tenant": "t1"}';
my %id = map {
	$_ => $node->safe_psql('postgres', qq{SELECT outbox_emit('$_.x', '{}', headers => '$headers')})
} sort keys %lists;
ok($sink->wait_delivered(4), 'the four events are delivered');

# the x- headers each request carried, event's and destination's
my %got = map { $_->{webhook_id} => $_ } @{ $sink->requests('/hook') };
sub sent
{
	my ($dest) = @_;
	my $r = $got{ $id{$dest} } or return 'not sent';
	return join(', ', map { "$_: $r->{headers}{$_}" } sort grep { /^x-/ } @{ $r->{header_names} });
}
is(sent('all'), 'x-dest: all, x-envoy-internal: true, x-is-admin: true, x-tenant: t1',
	'NULL: every event header, as in 1.1');
is(sent('none'), 'x-dest: none', 'an empty list: none, the destination\'s own header still');
is(sent('tenant'), 'x-dest: tenant, x-tenant: t1', '{X-Tenant}: that one, without case');
is(sent('envoy'), 'x-dest: envoy, x-envoy-internal: true', '{x-envoy-*}: those of the prefix');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox WHERE delivered_at IS NOT NULL
	AND attempts = 1 AND last_error IS NULL'), '4', 'each in one attempt');

# a change of the list applies to the next claim
$node->safe_psql('postgres', q{UPDATE outbox_destinations SET event_headers = '{x-is-admin,x-tenant}' WHERE name = 'envoy'});
$sink->reset;
$id{envoy} = $node->safe_psql('postgres', qq{SELECT outbox_emit('envoy.x', '{}', headers => '$headers')});
ok($sink->wait_delivered(1), 'delivered after the change');
%got = map { $_->{webhook_id} => $_ } @{ $sink->requests('/hook') };
is(sent('envoy'), 'x-dest: envoy, x-is-admin: true, x-tenant: t1', 'the new list applies');

$sink->stop;
$node->stop;
done_testing();

# A publication FOR ALL TABLES (a step of many migrations and CDC setups)
# takes in the extension's tables too, and PostgreSQL then refuses an
# UPDATE or DELETE on a published table without a replica identity. Every
# table the relay updates or deletes from has one, so with a real logical
# subscriber on a second cluster:
#   a. webhook and NOTIFY events emitted after the publication is created
#      are delivered once each, and the journal of each claim is deleted
#      (outbox_in_flight empty);
#   b. after a restart of the publisher, whose relay begins with a release
#      of the journal (a DELETE), new events are delivered too;
#   c. the subscriber receives the events' rows as delivered, and no row of
#      the journal;
#   d. the relay logged no error and counted no failure meanwhile.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $publisher = outbox_node('publisher', allows_streaming => 'logical');
# the subscriber has the extension's tables, for the changes to land in,
# and no relay: the rows it receives are history there
my $subscriber = outbox_node('subscriber', 'outbox.databases' => "''");
my $sink = start_sink();
my $url = $sink->url('/hook');

$publisher->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hook', 'pub.hook', '$url');
	INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('note', 'pub.note', 'pub_notes');
	CREATE PUBLICATION everything FOR ALL TABLES});
my $connstr = $publisher->connstr . ' dbname=postgres';
$subscriber->safe_psql('postgres', qq{
	CREATE SUBSCRIPTION everything CONNECTION '$connstr' PUBLICATION everything
	  WITH (copy_data = false)});
$publisher->wait_for_catchup('everything');
ok(wait_relay($publisher, 'postgres'), 'the publisher runs a relay');
my $offset = -s $publisher->logfile;

# Events of both kinds; waits until all are delivered and the journal is
# empty; returns how many rows have attempts = 1.
sub deliver_round
{
	my ($round, $n) = @_;
	emit($publisher, 'postgres', 'pub.hook', $n);
	emit($publisher, 'postgres', 'pub.note', $n);
	ok( $publisher->poll_query_until('postgres', qq{
			SELECT count(*) = 0 FROM outbox WHERE delivered_at IS NULL}),
		"$round: every event is delivered");
	ok($publisher->poll_query_until('postgres', 'SELECT count(*) = 0 FROM outbox_in_flight'),
		"$round: the journal is empty");
}

###
### a. delivery under the publication
###
deliver_round('a', 20);
is(scalar @{ $sink->delivered_ids('/hook') }, 20, 'a: the endpoint received 20 requests');

###
### b. a restart begins with a release of the journal
###
$publisher->restart;
ok(wait_relay($publisher, 'postgres'), 'b: a relay runs after the restart');
deliver_round('b', 20);
is(scalar @{ $sink->delivered_ids('/hook') }, 40, 'b: the endpoint received 40 requests in all');
is( $publisher->safe_psql('postgres', 'SELECT attempts, count(*) FROM outbox GROUP BY 1'),
	'1|80', 'b: each of the 80 events took one attempt');

###
### c. the subscriber has the delivered rows
###
$publisher->wait_for_catchup('everything');
is( $subscriber->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE delivered_at IS NOT NULL), count(*) FROM outbox}),
	'80|80', 'c: the subscriber has the 80 events, delivered');
is($subscriber->safe_psql('postgres', 'SELECT count(*) FROM outbox_in_flight'), '0',
	'c: and no journal row');

###
### d. nothing failed on the way
###
my @errors = relay_warnings($publisher, $offset);
is(scalar @errors, 0, 'd: the relay logged no error') or diag(join("\n", @errors));
is( $publisher->safe_psql('postgres', 'SELECT coalesce(sum(failed), 0) FROM outbox_relay_stats()'),
	'0', 'd: and counted no failure');

$sink->stop;
$subscriber->stop;
$publisher->stop;
done_testing();

# Many webhooks sharing few connections: the relay claims no more HTTP
# events than its connections can start soon, however many destinations
# there are. 200 webhooks, each taking its own event type, share 4
# connections to an endpoint that answers in 20 ms; 2,000 events, ten per
# webhook. Each destination alone is full only at 4 events of its own, so
# without a limit for the kind as a whole the relay took events as fast as
# it could claim them: 1,785 were in flight at the peak, undelivered, and
# every claim walked past them in the table.
# With it, the events in flight stay within a claim's batch and a round of
# requests, and each endpoint still gets exactly its events.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('webhooks_saturated',
	'outbox.http_max_connections' => 4,
	'outbox.batch_size' => 100);
my $sink = start_sink();
$sink->control(delay_ms => 20);
ok(wait_relay($node, 'postgres'), 'relay runs');
sub sql { my ($text) = @_; return $node->safe_psql('postgres', $text); }

my $base = $sink->url('');
sql(qq{
	INSERT INTO outbox_destinations (name, event_types, url)
	SELECT format('c%s', k), format('c.%s', k), '$base/c' || k
	  FROM generate_series(1, 200) k;
	CREATE FUNCTION peak_in_flight() RETURNS int LANGUAGE plpgsql AS \$f\$
	DECLARE
		peak int := 0;
	BEGIN
		-- sampled every 10 ms until every event is delivered (each
		-- statement reads a new snapshot); -1 if that takes over 3 minutes
		FOR i IN 1 .. 18000 LOOP
			-- in the journal of events in flight, not marked delivered
			-- yet: waiting in the relay, running, or their outcome not
			-- recorded yet
			peak := greatest(peak, (SELECT count(*)
			                          FROM outbox_in_flight j
			                          CROSS JOIN unnest(j.ids) AS f(id)
			                          JOIN outbox o ON o.id = f.id
			                         WHERE o.delivered_at IS NULL));
			IF NOT EXISTS (SELECT FROM outbox WHERE delivered_at IS NULL) THEN
				RETURN peak;
			END IF;
			PERFORM pg_sleep(0.01);
		END LOOP;
		RETURN -1;
	END
	\$f\$;
});

sql(q{
	SELECT count(outbox_emit('c.' || (i % 200 + 1), jsonb_build_object('n', i)))
	  FROM generate_series(1, 2000) i});
my $peak = sql('SELECT peak_in_flight()');
ok($peak > 0, "every event delivered (peak in flight: $peak)");
# a claim's batch (100), the 4 requests running and the 4 waiting that
# saturate the kind, and outcomes not recorded yet (up to 64), with room
# to spare: not the 800 of 200 queues of 4
cmp_ok($peak, '<=', 200, 'events in flight stay within a claim and a round of requests');

my $expected = sql(q{
	SELECT string_agg('/c' || substr(event_type, 3) || ' ' || event_id, E'\n'
	                  ORDER BY '/c' || substr(event_type, 3), event_id::text)
	  FROM outbox});
ok($sink->wait_delivered(2000), '2,000 deliveries arrived');
my @got = sort map { "$_->{path} $_->{webhook_id}" } @{ $sink->delivered };
is(join("\n", @got), $expected, 'each endpoint got exactly its events, each once');
is(sql(q{SELECT count(*) FROM outbox WHERE attempts <> 1}), '0',
	'none waited past its time limit for a connection: one attempt each');
is(join("\n", error_lines(log_since($node, 0))), '', 'no ERROR in the server log');

done_testing();

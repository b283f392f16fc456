# The monitoring setup of monitoring/, run: promtool checks the alerting
# rules and runs their unit tests (outbox.rules.test.yml), then the real
# postgres_exporter (Debian's prometheus-postgres-exporter, with the
# queries file, a role that is only outbox_monitor, and its own
# built-in metrics, over two databases with the extension as
# docs/monitoring.md says)
# and the real prometheus, both on 127.0.0.1, watch this cluster. The
# exporter's scrapes succeed (postgres_exporter 0.11 fails the whole
# scrape when one query fails) and carry both databases. An endpoint that
# no longer answers makes OutboxBacklogOld fire for its destination, and
# one that answers 410 Gone makes OutboxDestinationDisabled fire (and not
# OutboxBacklogOld: its events wait for it); once the first endpoint is
# back and its events are delivered, its alert resolves while the other
# stays.
#
# Prometheus waits minutes before the backlog alert fires in production
# (an event older than 600 s, for 5 minutes): this test runs the same
# rules with that one alert's threshold and duration cut to seconds (the
# test checks that exactly those two values were replaced). The others
# run unchanged; their timing is what the promtool cases check.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use HTTP::Tiny;
use IPC::Run ();
use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $monitoring = "$FindBin::RealBin/../../monitoring";
for my $bin (qw(promtool prometheus prometheus-postgres-exporter))
{
	BAIL_OUT("$bin is not installed: run ci/deps.sh as root")
	  unless grep { -x "$_/$bin" } split /:/, $ENV{PATH};
}

note(join('; ', map { (split /\n/, `$_ --version 2>&1`)[0] } qw(prometheus prometheus-postgres-exporter)));
command_ok([ 'promtool', 'check', 'rules', "$monitoring/outbox.rules.yml" ], 'promtool: the rules are valid');
command_ok([ 'promtool', 'test', 'rules', "$monitoring/outbox.rules.test.yml" ],
	'promtool: every rule fires when it must, and only then');

# retries every second at most, and no dead letter while the test runs
my $node = outbox_node('monitoring', schema => 'outbox', 'outbox.backoff_max' => "'1s'",
	'outbox.max_attempts' => 1000, 'outbox.databases' => "'postgres, app2'");
my $sink = start_sink();
$node->safe_psql('postgres', 'CREATE DATABASE app2; CREATE ROLE exporter LOGIN IN ROLE outbox_monitor');
$node->safe_psql('app2', 'CREATE SCHEMA outbox; CREATE EXTENSION outbox SCHEMA outbox');
ok(wait_relay($node, 'postgres') && wait_relay($node, 'app2'), 'the relays of both databases run');

my $tmp = PostgreSQL::Test::Utils::tempdir();
my @running;
END { $_->kill_kill for @running; }

# the exporter, with the repository's queries file
my $exporter_port = PostgreSQL::Test::Cluster::get_free_port();
{
	local $ENV{DATA_SOURCE_NAME} = sprintf('host=%s port=%d user=exporter dbname=postgres sslmode=disable',
		$node->host, $node->port);
	push @running, IPC::Run::start(
		[ 'prometheus-postgres-exporter', "--web.listen-address=127.0.0.1:$exporter_port",
		  "--extend.query-path=$monitoring/exporter_queries.yml",
		  '--auto-discover-databases', '--include-databases=postgres,app2' ],
		'>', "$tmp/exporter.log", '2>&1');
}

# the rules, with OutboxBacklogOld's threshold and duration in seconds
my $rules = slurp_file("$monitoring/outbox.rules.yml");
my $replaced = 0;
$rules =~ s{(- alert: OutboxBacklogOld\n.*?)> 600\n(.*?\n)(\s+)for: 5m\n}{$replaced++; "$1> 2\n$2$3for: 2s\n"}se;
is($replaced, 1, 'the live test cuts OutboxBacklogOld to seconds, and nothing else');
append_to_file("$tmp/rules.yml", $rules);

my $prometheus_port = PostgreSQL::Test::Cluster::get_free_port();
append_to_file("$tmp/prometheus.yml", <<"EOF");
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $tmp/rules.yml
scrape_configs:
  - job_name: outbox
    static_configs:
      - targets: ['127.0.0.1:$exporter_port']
EOF
push @running, IPC::Run::start(
	[ 'prometheus', "--config.file=$tmp/prometheus.yml", "--storage.tsdb.path=$tmp/data",
	  "--web.listen-address=127.0.0.1:$prometheus_port" ],
	'>', "$tmp/prometheus.log", '2>&1');

my $http = HTTP::Tiny->new(timeout => 10);
sub api
{
	my ($path) = @_;
	my $res = $http->get("http://127.0.0.1:$prometheus_port/api/v1/$path");
	return undef unless $res->{success};
	return decode_json($res->{content})->{data};
}
# the firing alerts, as "name severity database destination" strings, sorted
sub firing
{
	my $data = api('alerts') or return '(prometheus not answering)';
	return join(', ', sort map { join(' ', map { $_ // '-' } @{ $_->{labels} }{qw(alertname severity database destination)}) }
		  grep { $_->{state} eq 'firing' } @{ $data->{alerts} });
}
# the value of an instant query's single result, undef if none
sub value
{
	my ($query) = @_;
	my $data = api('query?' . $http->www_form_urlencode({ query => $query })) or return undef;
	my $r = $data->{result};
	return @$r == 1 ? $r->[0]{value}[1] : undef;
}

$sink->paths('/gone' => { status => 410 });
# orders' endpoint is a closed port until it is back
my $closed = PostgreSQL::Test::Cluster::get_free_port();
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox.outbox_destinations (name, event_types, url)
	VALUES ('orders', 'orders.*', 'http://127.0.0.1:%d/orders'), ('gone', 'gone.*', '%s');
	SELECT outbox.outbox_emit('orders.created', '{}') FROM generate_series(1, 3);
	SELECT outbox.outbox_emit('gone.created', '{}');}, $closed, $sink->url('/gone')));

ok(wait_until(sub { (value('outbox_backlog_pending{database="postgres",destination="orders",kind="http"}') // '') eq '3' }),
	'Prometheus has the backlog from the exporter: 3 events wait for orders')
  or diag(slurp_file("$tmp/exporter.log"));
is(value('pg_exporter_last_scrape_error'), '0', "the exporter's scrapes succeed: every query runs");
is(value('pg_exporter_user_queries_load_error'), '0', 'and it loaded the queries file');
is(value('count(outbox_relay_up == 1)'), '2', 'the relays of both databases are up');
is(value('count(count by (database) (outbox_backlog_pending{destination=""}))'), '2',
	'both databases report their backlog');
ok(wait_until(sub { defined value('outbox_latency_bucket{destination="gone",le="+Inf"}') }),
	'the latency buckets are there');

my $want = 'OutboxBacklogOld critical postgres orders, OutboxDestinationDisabled warning postgres gone';
ok(wait_until(sub { firing() eq $want }), "the alerts fire: $want") or diag('firing: ' . firing());

$node->safe_psql('postgres', sprintf(q{UPDATE outbox.outbox_destinations SET url = '%s' WHERE name = 'orders'},
	$sink->url('/orders')));
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM outbox.outbox WHERE event_type = 'orders.created' AND delivered_at IS NOT NULL"),
	'orders takes its events again');
$want = 'OutboxDestinationDisabled warning postgres gone';
ok(wait_until(sub { firing() eq $want }), "the backlog alert of orders resolves; $want stay")
  or diag('firing: ' . firing());
is(value('outbox_backlog_pending{destination="orders"}'), '0', 'nothing waits for orders');

done_testing();

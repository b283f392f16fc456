# The monitoring setup of monitoring/, run: promtool checks the alerting
# rules and runs their unit tests (outbox.rules.test.yml), then the real
# postgres_exporter (Debian's prometheus-postgres-exporter, with the
# queries file and a role that is only outbox_monitor and
# pg_read_all_stats) and the real prometheus, both on 127.0.0.1, watch
# this cluster. An endpoint that answers 503 makes OutboxBacklogOld fire
# for its destination, and one that answers 410 Gone makes
# OutboxDestinationDisabled fire; once the first answers 200 again and its
# events are delivered, its alert resolves while the other stays.
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
	'outbox.max_attempts' => 1000);
my $sink = start_sink();
ok(wait_relay($node, 'postgres'), 'relay runs');
$node->safe_psql('postgres', 'CREATE ROLE exporter LOGIN IN ROLE outbox_monitor, pg_read_all_stats');

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
		  "--extend.query-path=$monitoring/postgres_exporter.yml",
		  '--disable-default-metrics', '--disable-settings-metrics' ],
		'>', "$tmp/exporter.log", '2>&1');
}

# the rules, with OutboxBacklogOld's threshold and duration in seconds
my $rules = slurp_file("$monitoring/outbox.rules.yml");
my $replaced = 0;
$rules =~ s{(- alert: OutboxBacklogOld\n.*?)> 600\n(\s+)for: 5m\n}{$replaced++; "$1> 2\n$2for: 2s\n"}se;
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
# the firing alerts, as "name destination" strings, sorted
sub firing
{
	my $data = api('alerts') or return '(prometheus not answering)';
	return join(', ', sort map { "$_->{labels}{alertname} " . ($_->{labels}{destination} // '-') }
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

$sink->paths('/orders' => { status => 503 }, '/gone' => { status => 410 });
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox.outbox_destinations (name, event_types, url)
	VALUES ('orders', 'orders.*', '%s'), ('gone', 'gone.*', '%s');
	SELECT outbox.outbox_emit('orders.created', '{}') FROM generate_series(1, 3);
	SELECT outbox.outbox_emit('gone.created', '{}');}, $sink->url('/orders'), $sink->url('/gone')));

ok(wait_until(sub { (value('outbox_backlog_pending{destination="orders"}') // '') eq '3' }),
	'Prometheus has the backlog from the exporter: 3 events wait for orders')
  or diag(slurp_file("$tmp/exporter.log"));
ok(wait_until(sub { (value('outbox_relay_up') // '') eq '1' }), 'and the relay is up');

my $want = 'OutboxBacklogOld gone, OutboxBacklogOld orders, OutboxDestinationDisabled gone';
ok(wait_until(sub { firing() eq $want }), "the alerts fire: $want") or diag('firing: ' . firing());

$sink->paths('/orders' => { status => 200 }, '/gone' => { status => 410 });
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM outbox.outbox WHERE event_type = 'orders.created' AND delivered_at IS NOT NULL"),
	'orders takes its events again');
$want = 'OutboxBacklogOld gone, OutboxDestinationDisabled gone';
ok(wait_until(sub { firing() eq $want }), "the backlog alert of orders resolves; $want stay")
  or diag('firing: ' . firing());
is(value('outbox_backlog_pending{destination="orders"}'), '0', 'nothing waits for orders');

done_testing();

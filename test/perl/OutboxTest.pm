# Shared helpers of the TAP tests: a cluster with the extension preloaded,
# and the webhook sink of test/sink.py on 127.0.0.1.
package OutboxTest;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use File::Basename qw(dirname);
use File::Spec;
use HTTP::Tiny;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

our @EXPORT = qw(outbox_node start_sink wait_until);

my $test_dir = File::Spec->rel2abs(dirname(__FILE__) . '/..');

# A started node with outbox preloaded and created in database postgres.
# %conf: extra postgresql.conf lines, name => value.
sub outbox_node
{
	my ($name, %conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => delete $conf{allows_streaming} // 0);
	my %settings = (
		shared_preload_libraries => "'outbox'",
		'outbox.databases' => "'postgres'",
		'outbox.backoff_base' => "'100ms'",
		'outbox.poll_interval' => "'200ms'",
		max_worker_processes => 16,
		%conf);
	$node->append_conf('postgresql.conf',
		join('', map { "$_ = $settings{$_}\n" } sort keys %settings));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
	return $node;
}

# Polls $cond (a sub) until it returns true, up to the default timeout;
# returns whether it did. For conditions outside the database.
sub wait_until
{
	my ($cond) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 1 if $cond->();
		usleep(50_000);
	}
	return 0;
}

# Starts test/sink.py on a free port of 127.0.0.1; returns an OutboxTest::Sink.
sub start_sink
{
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port_file = "$dir/port";
	my $pid = fork();
	die "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		exec('python3', "$test_dir/sink.py", '--port-file', $port_file)
		  or die "exec python3: $!";
	}
	wait_until(sub { -s $port_file }) or die "sink did not start";
	my $port = PostgreSQL::Test::Utils::slurp_file($port_file);
	return bless { pid => $pid, base => "http://127.0.0.1:$port" },
	  'OutboxTest::Sink';
}

package OutboxTest::Sink;

my $http = HTTP::Tiny->new(timeout => 30);

sub url { my ($self, $path) = @_; return $self->{base} . ($path // '/hook'); }

sub _call
{
	my ($self, $method, $path, $data) = @_;
	my $res = $http->request($method, $self->{base} . $path,
		defined $data
		? { content => JSON::PP::encode_json($data), headers => { 'content-type' => 'application/json' } }
		: {});
	die "sink $method $path: $res->{status} $res->{content}" unless $res->{success};
	return JSON::PP::decode_json($res->{content});
}

sub control  { my ($self, %rules) = @_; return $self->_call('POST', '/_control', \%rules); }
sub reset    { my ($self) = @_; return $self->_call('POST', '/_reset', {}); }
sub requests { my ($self, $path) = @_; return $self->_call('GET', '/_requests' . _only($path)); }
sub stats    { my ($self, $path) = @_; return $self->_call('GET', '/_stats' . _only($path)); }
sub _only    { my ($path) = @_; return defined $path ? "?path=$path" : ''; }

# The requests answered with 2xx, in arrival order.
sub delivered
{
	my ($self, $path) = @_;
	return [ grep { $_->{status} >= 200 && $_->{status} < 300 } @{ $self->requests($path) } ];
}

# Waits until at least $n requests (to $path, if given) were answered 2xx.
sub wait_delivered
{
	my ($self, $n, $path) = @_;
	return OutboxTest::wait_until(sub { $self->stats($path)->{delivered} >= $n });
}

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'TERM', $self->{pid};
	waitpid($self->{pid}, 0);
	$self->{pid} = undef;
}

sub DESTROY { my ($self) = @_; $self->stop; }

1;

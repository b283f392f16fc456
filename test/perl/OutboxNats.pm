# Real nats-server processes on 127.0.0.1 for the JetStream tests, one
# server or a cluster of them, and test/nats_tool.c (built here with
# libnats) to create streams and read what they stored.
package OutboxNats;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use File::Basename qw(dirname);
use File::Spec;
use IPC::Run ();
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

use OutboxTest;

# every test that starts a NATS server is a test of the JetStream kind
OutboxTest::require_kind('jetstream');

our @EXPORT = qw(start_nats start_nats_cluster nats_tool);

my $test_dir = File::Spec->rel2abs(dirname(__FILE__) . '/..');
my $tool;

# The path of nats_tool, built once per test file.
sub nats_tool
{
	return $tool if defined $tool;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	$tool = "$dir/nats_tool";
	my ($out, $err) = run_command([ $ENV{CC} // 'cc', '-O2', '-o', $tool,
		"$test_dir/nats_tool.c", '-lnats' ]);
	die "cannot build nats_tool: $err" unless -x $tool;
	return $tool;
}

# Starts one server with JetStream (file storage); %opts: auth => 'user:pw'
# or token => 't'; max_payload => bytes; tls => { cert, key, ca } (the server's certificate and
# key, and the CA that signed them, for nats_tool).
sub start_nats
{
	my (%opts) = @_;
	my $self = bless {
		dir => PostgreSQL::Test::Utils::tempdir(),
		port => PostgreSQL::Test::Cluster::get_free_port(),
		%opts,
	}, 'OutboxNats::Server';
	$self->_write_conf;
	$self->start;
	return $self;
}

# Starts $n servers routed together as one JetStream cluster that can place
# a stream on all of them; returns them.
#
# Nodes started at once can campaign in the same first term, and
# nats-server 2.10 may then settle on a metadata group that lacks one of
# them for good ("no suitable peers for placement" for every stream with
# $n replicas). A cluster that cannot place a probe stream on $n nodes
# within 30 s is killed and started afresh, up to three times.
sub start_nats_cluster
{
	my ($n) = @_;
	for my $attempt (1 .. 3)
	{
		my @servers = _start_cluster($n);
		my $err = '';
		my $deadline = time() + 30;
		while (time() < $deadline)
		{
			my $rc;
			($rc, undef, $err) = $servers[0]->tool('add-stream', 'OUTBOX_PROBE', 'outbox-probe.>', $n, 120000);
			if ($rc == 0)
			{
				($rc, undef, $err) = $servers[0]->tool('delete-stream', 'OUTBOX_PROBE');
				die "delete-stream OUTBOX_PROBE: $err" if $rc;
				return @servers;
			}
			usleep(100_000);
		}
		note("attempt $attempt: the cluster cannot place a stream on $n nodes: $err");
		$_->stop('KILL') for @servers;
	}
	die "no JetStream cluster of $n nodes formed in three attempts";
}

sub _start_cluster
{
	my ($n) = @_;
	my @ports = map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. $n;
	my @cports = map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. $n;
	my @servers;
	for my $i (0 .. $n - 1)
	{
		my $self = bless {
			dir => PostgreSQL::Test::Utils::tempdir(),
			port => $ports[$i],
			name => "n$i",
			cluster_port => $cports[$i],
			routes => [ map { "nats-route://127.0.0.1:$_" } grep { $_ != $cports[$i] } @cports ],
		}, 'OutboxNats::Server';
		$self->_write_conf;
		$self->start(no_wait => 1);
		push @servers, $self;
	}
	$_->wait_ready for @servers;
	return @servers;
}

package OutboxNats::Server;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use JSON::PP;

sub _write_conf
{
	my ($self) = @_;
	my $conf = "listen: 127.0.0.1:$self->{port}\n"
	  . "jetstream { store_dir: \"$self->{dir}/store\", max_memory_store: 64MB, max_file_store: 2GB }\n";
	$conf .= "server_name: $self->{name}\n" if $self->{name};
	$conf .= "max_payload: $self->{max_payload}\n" if $self->{max_payload};
	$conf .= "cluster { name: outbox_test, listen: 127.0.0.1:$self->{cluster_port}, routes: ["
	  . join(', ', @{ $self->{routes} }) . "] }\n"
	  if $self->{cluster_port};
	if ($self->{auth})
	{
		my ($u, $p) = split /:/, $self->{auth}, 2;
		$conf .= "authorization { user: \"$u\", password: \"$p\" }\n";
	}
	$conf .= "authorization { token: \"$self->{token}\" }\n" if $self->{token};
	$conf .= "tls { cert_file: \"$self->{tls}{cert}\", key_file: \"$self->{tls}{key}\" }\n"
	  if $self->{tls};
	open my $fh, '>', "$self->{dir}/nats.conf" or die $!;
	print $fh $conf;
	close $fh;
}

# The URL of this server, with the credentials the test set (for nats_tool).
sub url
{
	my ($self) = @_;
	my $cred = $self->{auth} ? "$self->{auth}\@" : $self->{token} ? "$self->{token}\@" : '';
	my $scheme = $self->{tls} ? 'tls' : 'nats';
	return "$scheme://${cred}127.0.0.1:$self->{port}";
}

# The URL without credentials (for a destination).
sub plain_url
{
	my ($self) = @_;
	return ($self->{tls} ? 'tls' : 'nats') . "://127.0.0.1:$self->{port}";
}

sub start
{
	my ($self, %opts) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open STDOUT, '>>', "$self->{dir}/nats.log";
		open STDERR, '>&', \*STDOUT;
		exec('nats-server', '-c', "$self->{dir}/nats.conf") or die "exec nats-server: $!";
	}
	$self->{pid} = $pid;
	$self->wait_ready unless $opts{no_wait};
}

# Waits until JetStream answers on this server.
sub wait_ready
{
	my ($self) = @_;
	OutboxTest::wait_until(sub { ($self->tool('ping'))[0] == 0 })
	  or die "nats-server on port $self->{port} did not start: "
	  . slurp_file("$self->{dir}/nats.log");
}

# Stops the server: TERM (a clean shutdown), or KILL with $signal 'KILL'.
sub stop
{
	my ($self, $signal) = @_;
	return unless $self->{pid};
	kill $signal // 'TERM', $self->{pid};
	waitpid($self->{pid}, 0);
	$self->{pid} = undef;
}

# Runs nats_tool $cmd against this server; returns (exit status, stdout, stderr).
sub tool
{
	my ($self, $cmd, @args) = @_;
	my ($out, $err) = ('', '');
	local $ENV{NATS_TOOL_CA} = $self->{tls}{ca} if $self->{tls};
	my $rc = IPC::Run::run([ OutboxNats::nats_tool(), $cmd, $self->url, @args ],
		'>', \$out, '2>', \$err) ? 0 : ($? >> 8);
	return ($rc, $out, $err);
}

# Creates stream $name on $subject; %opts: replicas, duplicates_ms, noack.
sub add_stream
{
	my ($self, $name, $subject, %opts) = @_;
	my ($rc, $out, $err) = $self->tool('add-stream', $name, $subject,
		$opts{replicas} // 1, $opts{duplicates_ms} // 120000,
		$opts{noack} ? ('noack') : ());
	die "add-stream $name: $err" if $rc;
}

# The messages of stream $name: a list of {seq, subject, headers, bytes[, data]}.
sub messages
{
	my ($self, $name, $with_data) = @_;
	my ($rc, $out, $err);
	# a cluster that just lost a node answers reads only once its stream
	# has a leader again: a failed read is tried again, a wrong one is not
	OutboxTest::wait_until(sub {
			($rc, $out, $err) = $self->tool('dump', $name, $with_data ? ('data') : ());
			note("dump $name: $err") if $rc;
			$rc == 0;
		})
	  or die "dump $name: $err";
	return [ map { decode_json($_) } split /\n/, $out ];
}

# The number of messages stream $name holds ('' when it cannot be read).
sub count
{
	my ($self, $name) = @_;
	my ($rc, $out) = $self->tool('info', $name);
	return $rc == 0 && $out =~ /msgs=(\d+)/ ? $1 : '';
}

# Starts a core NATS responder that answers every message on $subject with
# $answer; returns its IPC::Run harness (kill_kill it when done).
sub responder
{
	my ($self, $subject, $answer) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ OutboxNats::nats_tool(), 'respond', $self->url, $subject, $answer ],
		'>', \$out, '2>', \$err);
	OutboxTest::wait_until(sub { $h->pump_nb; $out =~ /ready/ }) or die "responder did not start: $err";
	return $h;
}

sub log_text { my ($self) = @_; return slurp_file("$self->{dir}/nats.log"); }

sub DESTROY { my ($self) = @_; local $?; $self->stop('KILL'); }

1;

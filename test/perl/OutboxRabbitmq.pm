# A real rabbitmq-server (Debian's) for the TAP tests of the rabbitmq kind,
# on 127.0.0.1 only, with its own node name, ports, Erlang port mapper,
# cookie and data directory, so that tests running at once never share a
# broker. Its user is given in the configuration file; the tests reach it
# with npm amqplib (test/rabbitmq_tool.js) as an independent client.
package OutboxRabbitmq;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use IPC::Run;
use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

our @EXPORT = qw(rabbitmq_available start_rabbitmq last_error_of);

my $seq = 0;

# Where Debian puts the broker's own start script (/usr/sbin's wants root).
sub _server_script
{
	my @found = (glob('/usr/lib/rabbitmq/bin/rabbitmq-server'),
		glob('/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server'));
	return (grep { -x $_ } @found)[0];
}

# Whether rabbitmq-server and npm amqplib are installed (ci/deps.sh).
sub rabbitmq_available
{
	my $modules = ($ENV{OUTBOX_NODE_DIR} // '/var/cache/outbox-npm') . '/node_modules';
	return defined _server_script() && -d "$modules/amqplib";
}

# The last_error of an event of type $type on $node (database postgres),
# once one is recorded; 'no error recorded' if none is in time.
sub last_error_of
{
	my ($node, $type) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM outbox WHERE event_type = '$type' AND last_error IS NOT NULL")
	  or return 'no error recorded';
	return $node->safe_psql('postgres',
		"SELECT last_error FROM outbox WHERE event_type = '$type' AND last_error IS NOT NULL LIMIT 1");
}

# Starts a broker and waits until amqplib can use it; returns an OutboxRabbitmq.
# %opts: heartbeat => the seconds the broker proposes (RabbitMQ's 60 by
# default; a client asking for fewer gets fewer); max_message_size => the
# largest message body the broker takes, in bytes; tls => { ca, cert, key }
# (PEM files, OutboxTest::make_certificates): a TLS listener too, on
# $self->{tls_port}.
sub start_rabbitmq
{
	my (%opts) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $self = bless {
		dir => $dir,
		name => "outbox_$$" . '_' . $seq++ . '@localhost',
		port => PostgreSQL::Test::Cluster::get_free_port(),
		dist_port => PostgreSQL::Test::Cluster::get_free_port(),
		epmd_port => PostgreSQL::Test::Cluster::get_free_port(),
		user => 'relay',
		password => 'relay-secret-7Qx2',
	}, 'OutboxRabbitmq';
	PostgreSQL::Test::Utils::append_to_file("$dir/rabbitmq.conf",
		"listeners.tcp.default = 127.0.0.1:$self->{port}\n"
		  . "default_user = $self->{user}\ndefault_pass = $self->{password}\n"
		  . "loopback_users = none\n"
		  . (defined $opts{heartbeat} ? "heartbeat = $opts{heartbeat}\n" : '')
		  . (defined $opts{max_message_size} ? "max_message_size = $opts{max_message_size}\n" : ''));
	if (my $tls = $opts{tls})
	{
		$self->{tls_port} = PostgreSQL::Test::Cluster::get_free_port();
		PostgreSQL::Test::Utils::append_to_file("$dir/rabbitmq.conf",
			"listeners.ssl.default = 127.0.0.1:$self->{tls_port}\n"
			  . "ssl_options.cacertfile = $tls->{ca}\nssl_options.certfile = $tls->{cert}\n"
			  . "ssl_options.keyfile = $tls->{key}\nssl_options.verify = verify_none\n"
			  . "ssl_options.fail_if_no_peer_cert = false\n");
	}
	PostgreSQL::Test::Utils::append_to_file("$dir/enabled_plugins", "[].\n");
	$self->start;
	return $self;
}

sub _env
{
	my ($self) = @_;
	my $d = $self->{dir};
	return (HOME => $d, RABBITMQ_NODENAME => $self->{name}, RABBITMQ_NODE_IP_ADDRESS => '127.0.0.1',
		RABBITMQ_NODE_PORT => $self->{port}, RABBITMQ_DIST_PORT => $self->{dist_port},
		ERL_EPMD_PORT => $self->{epmd_port}, ERL_EPMD_ADDRESS => '127.0.0.1',
		RABBITMQ_CONFIG_FILE => "$d/rabbitmq", RABBITMQ_ENABLED_PLUGINS_FILE => "$d/enabled_plugins",
		RABBITMQ_MNESIA_BASE => "$d/mnesia", RABBITMQ_LOG_BASE => "$d/log",
		RABBITMQ_PID_FILE => "$d/pid", RABBITMQ_LOGS => '-',
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS => '-kernel inet_dist_use_interface {127,0,0,1}');
}

# Starts (again, on the same data and port) and waits until it answers.
sub start
{
	my ($self) = @_;
	local %ENV = (%ENV, $self->_env);
	$self->{h} = IPC::Run::start([ _server_script() ], '>>', "$self->{dir}/server.log", '2>&1');
	OutboxTest::wait_until(sub { eval { $self->tool({ command => 'setup' }); 1 } })
	  or die "rabbitmq-server did not start:\n" . PostgreSQL::Test::Utils::slurp_file("$self->{dir}/server.log");
	# kept: the pid file goes with the test's temporary directory, which
	# can be removed before this object is destroyed
	$self->{pid} = $self->vm_pid;
	return;
}

# Stops the broker (TERM: a clean stop; KILL) and waits for its end. The
# start script runs the Erlang VM as a child, whose pid is in the pid file.
sub stop
{
	my ($self, $signal) = @_;
	return unless $self->{h};
	my $pid = $self->{pid};
	kill $signal // 'TERM', $pid if $pid;
	OutboxTest::wait_until(sub { !kill 0, $pid }) if $pid;
	# the start script stops the broker on TERM
	$self->{h}->signal('TERM') unless $pid;
	$self->{h}->kill_kill;
	delete $self->{h};
	return;
}

# The pid of the broker's Erlang VM, or undef: its pid file, or else the
# beam.smp process started with this broker's own Erlang port mapper port.
sub vm_pid
{
	my ($self) = @_;
	if (-s "$self->{dir}/pid")
	{
		my $pid = PostgreSQL::Test::Utils::slurp_file("$self->{dir}/pid");
		chomp $pid;
		return $pid if $pid =~ /^\d+$/;
	}
	for my $cmdline (glob('/proc/[0-9]*/cmdline'))
	{
		open my $fh, '<', $cmdline or next;
		my $args = join ' ', split /\0/, (<$fh> // '');
		return $1 if $args =~ /beam/ && $args =~ / -epmd_port $self->{epmd_port}\b/ && $cmdline =~ m{/(\d+)/};
	}
	return undef;
}

# Freezes (STOP) or thaws (CONT) the broker's Erlang VM.
sub signal
{
	my ($self, $signal) = @_;
	kill $signal, $self->{pid};
	return;
}

sub url { my ($self) = @_; return "amqp://127.0.0.1:$self->{port}"; }
sub amqp_url { my ($self) = @_; return "amqp://$self->{user}:$self->{password}\@127.0.0.1:$self->{port}"; }

# A destination's options: its URL and user, and %more.
sub options
{
	my ($self, %more) = @_;
	return JSON::PP->new->canonical->encode(
		{ urls => $self->url, user => $self->{user}, password => $self->{password}, %more });
}

# Runs test/rabbitmq_tool.js with $input (the URL added) and returns its answer.
sub tool
{
	my ($self, $input) = @_;
	return OutboxTest::node_json('rabbitmq_tool.js', { url => $self->amqp_url, %$input }, 'amqplib');
}

sub DESTROY
{
	my ($self) = @_;
	local $?;
	$self->stop('KILL') if $self->{h};
	local %ENV = (%ENV, $self->_env);
	# the Erlang port mapper the broker started, on the test's own port
	system('epmd -kill >/dev/null 2>&1');
	return;
}

1;

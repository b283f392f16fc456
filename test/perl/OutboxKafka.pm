# librdkafka's mock Kafka cluster for the TAP tests of the kafka kind. No
# Kafka broker is installable on the test machines (Debian packages
# clients only), so the brokers are librdkafka's own mock (rdkafka_mock.h):
# they speak the Kafka protocol on 127.0.0.1, with idempotent producers,
# fetches and injected errors, hosted by test/kafka_mock.c, built here.
# Messages are read back with Debian's kcat, an independent consumer.
package OutboxKafka;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use File::Basename;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(kafka_available start_kafka);

# Whether kcat and librdkafka's headers (librdkafka-dev) are installed.
sub kafka_available
{
	return -e '/usr/include/librdkafka/rdkafka_mock.h' && system('command -v kcat >/dev/null') == 0;
}

# Builds test/kafka_mock.c, starts a cluster of $brokers (3 by default)
# and waits for its listeners; returns an OutboxKafka.
sub start_kafka
{
	my (%opts) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $src = dirname(__FILE__) . '/../kafka_mock.c';
	system($ENV{CC} // 'cc', '-o', "$dir/kafka_mock", $src, '-lrdkafka') == 0
	  or die "could not build $src";
	my $self = bless { dir => $dir, in => '', out => '' }, __PACKAGE__;
	$self->{run} = IPC::Run::start([ "$dir/kafka_mock", $opts{brokers} // 3 ],
		'<', \$self->{in}, '>', \$self->{out}, '2>', "$dir/stderr",
		IPC::Run::timeout(3600));
	$self->{bootstraps} = $self->_answer(qr/^bootstraps (\S+)\n/);
	return $self;
}

sub _answer
{
	my ($self, $re) = @_;
	my $deadline = time + 30;
	while ($self->{out} !~ $re)
	{
		die "kafka_mock: no answer: $self->{out}" if time > $deadline;
		$self->{run}->pump_nb;
		select(undef, undef, undef, 0.01);
	}
	$self->{out} =~ s/$re// or die 'unreachable';
	return $1;
}

# The bootstrap servers, host:port,... on 127.0.0.1.
sub bootstraps { my ($self) = @_; return $self->{bootstraps}; }

# Sends one command (test/kafka_mock.c lists them); dies unless it is done.
sub command
{
	my ($self, $line) = @_;
	$self->{in} .= "$line\n";
	my $answer = $self->_answer(qr/^(ok|error [^\n]*)\n/m);
	die "kafka_mock: $line: $answer" unless $answer eq 'ok';
	return;
}

# A destination's options as JSON: the cluster's servers and %options.
sub options
{
	my ($self, %options) = @_;
	return JSON::PP->new->canonical->encode({ bootstrap_servers => $self->{bootstraps}, %options });
}

# Every message of $topic from the start, read with kcat: a list of
# { partition, offset, key, payload, headers => { name => value } }.
sub consume
{
	my ($self, $topic) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-C', '-q', '-e', '-J', '-b', $self->{bootstraps}, '-t', $topic,
			'-X', 'topic.metadata.refresh.interval.ms=100' ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat: $err";
	my @messages;
	for my $line (split /\n/, $out)
	{
		my $m = decode_json($line);
		my %headers = @{ $m->{headers} // [] };
		push @messages, { partition => $m->{partition}, offset => $m->{offset},
			key => $m->{key}, payload => $m->{payload}, headers => \%headers };
	}
	return \@messages;
}

# Stops the cluster: every test calls it before it ends.
sub stop
{
	my ($self) = @_;
	return unless $self->{run};
	$self->{in} .= "quit\n";
	$self->{run}->finish or $self->{run}->kill_kill;
	delete $self->{run};
	return;
}

1;

# What the upgrade tests share: a released version's source (from
# ci/check.sh, which extracts it from git), a copy of the server's
# installation under the test's directory into which a release built from
# that source and then the new build are installed, and a node that runs
# from the copy. The real installation is not writable by the tests, and
# is never touched.
#
#   my $src = release_source('1.1');          # or skip_all, saying why
#   my $inst = OutboxUpgrade->new;
#   $inst->install_release('1.1', $src);
#   my $node = $inst->node('upgrade');
#   ...
#   $inst->install_new;                       # under the running server
package OutboxUpgrade;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use File::Basename qw(dirname);
use File::Copy qw(copy);
use Fcntl qw(:flock);
use File::Path qw(make_path rmtree);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(release_source);

# The source tree of release $version, named by OUTBOX_<version>_SRC (dots
# as underscores: OUTBOX_1_1_SRC). Without it, or if its outbox.control
# is not that version's, the test file is skipped with a warning that says
# why (OUTBOX_<version>_SRC_ERROR, set by ci/check.sh when it could not
# extract the release).
sub release_source
{
	my ($version) = @_;
	(my $var = "OUTBOX_${version}_SRC") =~ tr/./_/;
	my $src = $ENV{$var} // '';
	my $control = $src eq '' ? '' : eval { slurp_file("$src/outbox.control") } // '';
	return $src if $control =~ /^default_version = '\Q$version\E'$/m;
	my $why = $ENV{"${var}_ERROR"}
	  || ($src eq ''
		? "$var does not name the $version source (ci/check.sh extracts it from git)"
		: "$var ($src) is not the source of $version");
	diag("WARNING: the upgrade from $version is NOT tested: $why");
	plan skip_all => "no $version source: $why";
}

# A copy of the installation of PG_CONFIG under a new temporary directory:
# PostgreSQL finds its lib and share directories relative to the binary it
# runs, so the binaries are copied and the rest linked, without any outbox
# file.
sub new
{
	my ($class) = @_;
	my $pg_config = $ENV{PG_CONFIG} || 'pg_config';
	my %dir = map { my $d = `$pg_config --$_`; chomp $d; ($_ => $d) } qw(bindir pkglibdir sharedir);
	die "$pg_config failed" if grep { $_ eq '' } values %dir;
	my $tmp = PostgreSQL::Test::Utils::tempdir();
	my $self = bless { pg_config => $pg_config, dir => \%dir, tmp => $tmp, root => "$tmp/root" }, $class;
	my $root = $self->{root};

	make_path("$root$dir{bindir}", "$root$dir{pkglibdir}", "$root$dir{sharedir}/extension");
	system_or_bail('cp', '-a', "$dir{bindir}/.", "$root$dir{bindir}");
	_link_all($dir{pkglibdir}, "$root$dir{pkglibdir}", qr/^outbox\./);
	_link_all($dir{sharedir}, "$root$dir{sharedir}", qr/^extension$/);
	_link_all("$dir{sharedir}/extension", "$root$dir{sharedir}/extension", qr/^outbox[.-]/);
	return $self;
}

sub _link_all
{
	my ($from, $to, $skip) = @_;
	opendir(my $dh, $from) or die "opendir $from: $!";
	for my $e (grep { !/^\.\.?$/ && !/$skip/ } readdir $dh)
	{
		symlink("$from/$e", "$to/$e") or die "symlink $to/$e: $!";
	}
	closedir $dh;
}

# The temporary directory the copy is in, for the test's own files.
sub tmp { my ($self) = @_; return $self->{tmp}; }

# Installs the outbox files found under prefix $from (a DESTDIR, or '' for
# the installed new build) into the copy, each as a new file, as make
# install does: a running server keeps the library it has loaded.
sub install
{
	my ($self, $from) = @_;
	my ($root, %dir) = ($self->{root}, %{ $self->{dir} });
	my @files = ("$dir{pkglibdir}/outbox.so",
		map { "$dir{sharedir}/extension/$_" } grep { /^outbox[.-]/ }
		  do { opendir(my $dh, "$from$dir{sharedir}/extension") or die $!; readdir $dh });
	unlink glob("$root$dir{sharedir}/extension/outbox[.-]*");
	for my $f (@files)
	{
		unlink "$root$f";
		copy("$from$f", "$root$f") or die "copy $from$f: $!";
	}
	chmod 0755, "$root$dir{pkglibdir}/outbox.so";
}

# The new build (installed with the PG_CONFIG of the tests) into the copy.
sub install_new { my ($self) = @_; $self->install(''); }

# Builds release $version from its source tree $src (copied first) with
# this server's pg_config, and installs it into the copy. A run of the
# suite builds each release once, under tmp_check, where every test file
# of the run has its directories: the first file to need it builds it,
# holding a lock, and a file that needs it meanwhile waits for the lock,
# then installs the same build.
sub install_release
{
	my ($self, $version, $src) = @_;
	my $pg_config = $self->{pg_config};
	my $dir = "$PostgreSQL::Test::Utils::tmp_check/release-$version";
	my $stamp = "$dir/built";
	open(my $lock, '>>', "$dir.lock") or die "open $dir.lock: $!";
	flock($lock, LOCK_EX) or die "flock $dir.lock: $!";
	unless (-f $stamp && slurp_file($stamp) eq "$src\n$pg_config\n")
	{
		rmtree($dir);
		make_path($dir);
		system_or_bail('cp', '-R', $src, "$dir/src");
		system_or_bail('make', '-s', '-j2', '-C', "$dir/src", "PG_CONFIG=$pg_config", 'with_llvm=no');
		system_or_bail('make', '-s', '-C', "$dir/src", "PG_CONFIG=$pg_config", 'with_llvm=no',
			'install', "DESTDIR=$dir/dest");
		append_to_file($stamp, "$src\n$pg_config\n");
	}
	close($lock);
	$self->install("$dir/dest");
}

# A new node (not initialized) that runs from the copy.
sub node
{
	my ($self, $name) = @_;
	return PostgreSQL::Test::Cluster->new($name,
		install_path => $self->{root} . dirname($self->{dir}{bindir}));
}

1;

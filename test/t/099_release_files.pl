# One version everywhere: outbox.control's default_version, META.json (PGXN,
# where a version is semver: 1.1 is 1.1.0), debian/changelog, CHANGELOG.md
# (a release is dated, the same day as its Debian entry; a version in
# development says so in both: "(unreleased)" and UNRELEASED) and the newest
# outbox--*.sql, reachable by updates from every older version; every file
# the control and META.json name exists (the library where the control
# says, installed); META.json is valid by the PGXN Meta Spec's rules
# (test/pgxn/meta-spec-1.0.schema.json, with ajv); the README's
# Compatibility table lists the versions debian/pgversions builds for.
# Each rule is then broken once in a copy of the files, and the check must
# name exactly that.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use File::Copy qw(copy);
use File::Path qw(make_path);
use File::Spec;
use IPC::Run ();
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $top = File::Spec->rel2abs("$FindBin::RealBin/../..");
my $node_modules = ($ENV{OUTBOX_NODE_DIR} // '/var/cache/outbox-npm') . '/node_modules';
die "the ajv package is not in $node_modules: run ci/deps.sh as root" unless -d "$node_modules/ajv";
my $pg_config = $ENV{PG_CONFIG} || 'pg_config';
chomp(my $pkglibdir = `$pg_config --pkglibdir`);
die "$pg_config --pkglibdir failed" unless $pkglibdir;

sub read_file { my ($f) = @_; return -f $f ? slurp_file($f) : undef; }

# The problems of the release files under $dir, one line each.
sub problems
{
	my ($dir) = @_;
	my @p;
	my $control = read_file("$dir/outbox.control") // return ('outbox.control is missing');
	my ($v) = $control =~ /^default_version = '([^']*)'$/m;
	return ('outbox.control has no default_version') unless defined $v;
	my $semver = $v =~ /^\d+\.\d+$/ ? "$v.0" : $v;

	# the control file's library, as installed
	my ($module) = $control =~ /^module_pathname = '\$libdir\/([^']*)'$/m;
	push @p, 'outbox.control has no module_pathname in $libdir' unless defined $module;
	push @p, "the library outbox.control names is not installed: $pkglibdir/$module.so"
	  if defined $module && !-f "$pkglibdir/$module.so";

	# META.json
	my $meta_text = read_file("$dir/META.json");
	if (!defined $meta_text) { push @p, 'META.json is missing'; }
	else
	{
		my $meta = eval { decode_json($meta_text) };
		if (!$meta) { push @p, 'META.json is not JSON'; }
		else
		{
			push @p, "META.json version $meta->{version}, outbox.control $v (as semver $semver)"
			  if ($meta->{version} // '') ne $semver;
			for my $ext (sort keys %{ $meta->{provides} // {} })
			{
				my $pr = $meta->{provides}{$ext};
				push @p, "META.json provides $ext $pr->{version}, outbox.control $v (as semver $semver)"
				  if ($pr->{version} // '') ne $semver;
				for my $k (qw(file docfile))
				{
					push @p, "META.json provides $ext: its $k $pr->{$k} is missing"
					  if defined $pr->{$k} && !-f "$dir/$pr->{$k}";
				}
			}
			my ($out, $err) = ('', '');
			local $ENV{NODE_PATH} = $node_modules;
			IPC::Run::run([ 'node', "$top/test/pgxn_meta_check.js", "$dir/META.json" ], '>', \$out, '2>', \$err);
			push @p, map { "META.json by the PGXN Meta Spec: $_" } split /\n/, $out . $err
			  if $out ne "valid\n";
		}
	}

	# debian/changelog: the newest entry
	my $deb = read_file("$dir/debian/changelog") // '';
	my ($deb_up, $dist) = $deb =~ /^\S+ \(([^-)]+)-[^)]+\) (\S+);/;
	my ($deb_date) = $deb =~ /^ -- .*>  \w{3}, (\d\d \w{3} \d{4})/m;
	# CHANGELOG.md: the newest heading, "## <version> (<date>)", or
	# "## <version> (unreleased)" while it is in development
	my ($cl_v, $cl_when) = (read_file("$dir/CHANGELOG.md") // '') =~ /^## (\S+)(?: \(([^)]*)\))?$/m;
	my $developing = ($cl_when // '') eq 'unreleased';
	if (!defined $deb_up) { push @p, 'debian/changelog has no entry'; }
	else
	{
		push @p, "debian/changelog $deb_up, outbox.control $v" if $deb_up ne $v;
		push @p, "debian/changelog $deb_up is $dist, not released" if $dist eq 'UNRELEASED' && !$developing;
		push @p, "debian/changelog $deb_up is $dist, CHANGELOG.md unreleased" if $dist ne 'UNRELEASED' && $developing;
	}

	if (!defined $cl_v) { push @p, 'CHANGELOG.md has no version heading'; }
	else
	{
		push @p, "CHANGELOG.md $cl_v, outbox.control $v" if $cl_v ne $v;
		if ($developing) { }
		elsif (($cl_when // '') !~ /^(\d{4})-(\d\d)-(\d\d)$/) { push @p, "CHANGELOG.md $cl_v is not dated: ($cl_when)"; }
		elsif (defined $deb_date)
		{
			my @mon = qw(Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec);
			my $as_deb = sprintf('%02d %s %d', $3, $mon[ $2 - 1 ], $1);
			push @p, "CHANGELOG.md dates $cl_v $cl_when, debian/changelog $deb_date" if $as_deb ne $deb_date;
		}
	}

	# the SQL scripts: none past $v, and from each version an update path to it
	opendir(my $dh, $dir) or die "opendir $dir: $!";
	my (%edge, %seen);
	for my $f (readdir $dh)
	{
		if ($f =~ /^outbox--([^-]+)--([^-]+)\.sql$/) { push @{ $edge{$1} }, $2; $seen{$1} = $seen{$2} = 1; }
		elsif ($f =~ /^outbox--([^-]+)\.sql$/) { $seen{$1} = 1; }
	}
	closedir $dh;
	my $cmp = sub { my @a = split /\./, $_[0]; my @b = split /\./, $_[1];
		($a[0] // 0) <=> ($b[0] // 0) || ($a[1] // 0) <=> ($b[1] // 0) || ($a[2] // 0) <=> ($b[2] // 0) };
	my ($newest) = sort { $cmp->($b, $a) } keys %seen;
	push @p, "the newest SQL script is for $newest, outbox.control $v" if ($newest // '') ne $v;
	for my $from (sort keys %seen)
	{
		my (%reach, @todo) = ($from => 1);
		@todo = ($from);
		while (defined(my $x = shift @todo)) { for (@{ $edge{$x} // [] }) { push @todo, $_ unless $reach{$_}++; } }
		push @p, "no update path from $from to $v" unless $reach{$v};
	}

	# debian/pgversions and the README's Compatibility table
	my @pgv = grep { /\S/ } split /\n/, read_file("$dir/debian/pgversions") // '';
	my ($compat) = (read_file("$dir/README.md") // '') =~ /^## Compatibility\n(.*?)^## /ms;
	my @readme = ($compat // '') =~ /^\| (\d+) \|/mg;
	push @p, 'debian/pgversions ' . join(',', @pgv) . ', README Compatibility ' . join(',', @readme)
	  if join(',', @pgv) ne join(',', @readme);
	return @p;
}

is(join("\n", problems($top)), '', 'the release files agree on one version');

# Each rule broken once, in a copy.
my $copy = PostgreSQL::Test::Utils::tempdir();
sub fresh_copy
{
	system_or_bail('rm', '-rf', "$copy/t");
	make_path("$copy/t/debian");
	copy("$top/$_", "$copy/t/$_") or die "copy $_: $!"
	  for (qw(outbox.control META.json CHANGELOG.md README.md debian/changelog debian/pgversions),
		map { s{^\Q$top\E/}{}r } glob("$top/outbox--*.sql"));
	return "$copy/t";
}
sub edit
{
	my ($file, $from, $to) = @_;
	my $text = slurp_file($file);
	$text =~ s/$from/$to/ or die "no $from in $file";
	open my $fh, '>', $file or die $!;
	print $fh $text;
	close $fh;
}
my ($v) = slurp_file("$top/outbox.control") =~ /^default_version = '([^']*)'$/m;
my %broken = (
	'META.json version' => [ sub { edit("$_[0]/META.json", qr/"version": "\Q$v\E\.0",\n   "maintainer"/,
				"\"version\": \"9.9.0\",\n   \"maintainer\"") },
		"META.json version 9.9.0, outbox.control $v (as semver $v.0)" ],
	'META.json provides version' => [ sub { edit("$_[0]/META.json", qr/"version": "\Q$v\E\.0"\n      \}/,
				"\"version\": \"$v\"\n      }") },
		"META.json provides outbox $v, outbox.control $v (as semver $v.0)\n"
		  . 'META.json by the PGXN Meta Spec: /provides/outbox/version must match pattern ' ],
	'META.json docfile' => [ sub { unlink("$_[0]/README.md") },
		"META.json provides outbox: its docfile README.md is missing\ndebian/pgversions 15,17,18, README Compatibility " ],
	'META.json spec' => [ sub { edit("$_[0]/META.json", qr/"license": "postgresql"/, '"license": "PostgreSQL 2"') },
		"META.json by the PGXN Meta Spec: /license must be equal to one of the allowed values\n"
		  . "META.json by the PGXN Meta Spec: /license must be array\n"
		  . "META.json by the PGXN Meta Spec: /license must be object\n"
		  . "META.json by the PGXN Meta Spec: /license must match exactly one schema in oneOf" ],
	'debian/changelog version' => [ sub { edit("$_[0]/debian/changelog", qr/\(\Q$v\E-/, '(9.9-') },
		"debian/changelog 9.9, outbox.control $v" ],
	'a newer script' => [ sub { copy("$_[0]/outbox--1.0.sql", "$_[0]/outbox--9.9.sql") or die },
		"the newest SQL script is for 9.9, outbox.control $v\nno update path from 9.9 to $v" ],
	'no update path' => [ sub { copy("$_[0]/outbox--1.0.sql", "$_[0]/outbox--0.9.sql") or die },
		"no update path from 0.9 to $v" ],
	'README compatibility' => [ sub { edit("$_[0]/README.md", qr/^\| 18 \|/m, '| 19 |') },
		"debian/pgversions 15,17,18, README Compatibility 15,17,19" ],);
# the rules of the state the files are in: released, or in development
if (slurp_file("$top/CHANGELOG.md") =~ /^## \Q$v\E \(unreleased\)$/m)
{
	$broken{'debian/changelog released'} = [ sub { edit("$_[0]/debian/changelog", qr/\) UNRELEASED;/, ') unstable;') },
		"debian/changelog $v is unstable, CHANGELOG.md unreleased" ];
	$broken{'CHANGELOG.md released'} = [ sub { edit("$_[0]/CHANGELOG.md", qr/^## \Q$v\E \(unreleased\)$/m, "## $v (2026-12-05)") },
		"debian/changelog $v is UNRELEASED, not released" ];
	$broken{'CHANGELOG.md undated'} = [ sub { edit("$_[0]/CHANGELOG.md", qr/^## \Q$v\E \(unreleased\)$/m, "## $v (soon)") },
		"debian/changelog $v is UNRELEASED, not released\nCHANGELOG.md $v is not dated: (soon)" ];
}
else
{
	$broken{'debian/changelog unreleased'} = [ sub { edit("$_[0]/debian/changelog", qr/\) \w+;/, ') UNRELEASED;') },
		"debian/changelog $v is UNRELEASED, not released" ];
	$broken{'CHANGELOG.md undated'} = [ sub { edit("$_[0]/CHANGELOG.md", qr/^## \Q$v\E \([^)]*\)$/m, "## $v (soon)") },
		"CHANGELOG.md $v is not dated: (soon)" ];
	$broken{'CHANGELOG.md date'} = [ sub { edit("$_[0]/CHANGELOG.md", qr/^## \Q$v\E \(\d{4}/m, "## $v (1999") },
		qr/^CHANGELOG\.md dates \Q$v\E 1999-\d\d-\d\d, debian\/changelog \d\d \w{3} \d{4}$/ ];
}
for my $name (sort keys %broken)
{
	my ($break, $want) = @{ $broken{$name} };
	my $dir = fresh_copy();
	$break->($dir);
	my $got = join("\n", problems($dir));
	if (ref $want) { like($got, $want, "caught: $name"); }
	elsif ($want =~ / $/ || $want =~ /pattern $/) { is(substr($got, 0, length $want), $want, "caught: $name"); }
	else { is($got, $want, "caught: $name"); }
}

done_testing();

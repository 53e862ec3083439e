# Sourced by java_stacks.sh and java_stress.sh: the real JVM programs they run
# (javac, scalac, jruby, tomcat under wrk), their inputs, and the daemon.
# Expects: $me (script name for messages), $build, $jhome, $tmp (a 755
# directory), and the arrays agent_env (extra JVM environment).

# What the scripts start, stopped by jw_stop_all.
daemon_pid=""
job_pid=""
tomcat_pid=""
load_pid=""

# Run as root with a build; install what the programs in $1 need; make $tmp
# (a new /tmp/$2.XXXXXX, readable by the programs' users).
jw_prepare() {
	local f
	if [ "$(id -u)" -ne 0 ]; then
		echo "$me: run as root (it starts jprofd)" >&2
		exit 1
	fi
	for f in "$build/jprofd" "$build/jprofctl" "$build/agent/libjprofagent.so"; do
		[ -e "$f" ] || { echo "$me: $f missing; build first" >&2; exit 1; }
	done
	jw_install "$1"
	tmp=$(mktemp -d "/tmp/$2.XXXXXX")
	chmod 755 "$tmp"
}

# Stop the load (wrk), tomcat, the program and the daemon; remove $tmp.
jw_stop_all() {
	[ -n "$load_pid" ] && kill -TERM "$load_pid" 2>/dev/null || true
	[ -n "$tomcat_pid" ] && kill -KILL "$tomcat_pid" 2>/dev/null || true
	[ -n "$job_pid" ] && kill -KILL "$job_pid" 2>/dev/null || true
	[ -n "$daemon_pid" ] && kill -TERM "$daemon_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}

# Install what the programs in $1 (a list) need and is missing.
jw_install() {
	local need=() p
	for p in $1; do
		case $p in
		scalac) command -v scalac >/dev/null || need+=(scala) ;;
		jruby) command -v jruby >/dev/null || need+=(jruby) ;;
		tomcat) [ -e /usr/share/tomcat10/bin/catalina.sh ] || need+=(tomcat10)
			command -v wrk >/dev/null || need+=(wrk) ;;
		esac
	done
	[ -e /usr/lib/jvm/java-17-openjdk-amd64/lib/src.zip ] || need+=(openjdk-17-source)
	if [ ${#need[@]} -gt 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}" >/dev/null
	fi
}

# Inputs under $tmp/work: javac's sources, scalac's, the Ruby loop, and a
# tomcat base (made on first use, see tomcat_start).
jw_inputs() {
	mkdir -p "$tmp/work"
	# javac's input: java.util, java.time and java.lang of java.base, compiled as
	# a patch of java.base (as the JDK's build does), from the running JDK's
	# own sources when it has them (JDK 17's do not compile against JDK 25's
	# java.base).
	local zip=$jhome/lib/src.zip
	[ -e "$zip" ] || zip=/usr/lib/jvm/java-17-openjdk-amd64/lib/src.zip
	(cd "$tmp/work" && unzip -q "$zip" \
		'java.base/java/util/*' 'java.base/java/time/*' 'java.base/java/lang/*')
	find "$tmp/work/java.base" -name '*.java' >"$tmp/work/javac.files"
	# scalac's input: pattern matches over case classes and collection lambdas
	# (what the Scala compiler spends its time typing and transforming).
	mkdir -p "$tmp/work/scala"
	python3 - "$tmp/work/scala" <<'PY'
import sys
for i in range(4):
    with open("%s/M%d.scala" % (sys.argv[1], i), "w") as f:
        f.write("package bench.m%d\n" % i)
        f.write("sealed trait Shape { def area: Double }\n")
        for j in range(10):
            f.write("case class S%d(a: Int, b: String) extends Shape { def area: Double = a * %d.0 }\n"
                    % (j, j))
        f.write("object Ops {\n")
        for j in range(30):
            f.write("  def f%d(s: Shape): Int = s match {\n" % j)
            for k in range(10):
                f.write("    case S%d(a, b) => a + b.length + %d\n" % (k, j))
            f.write("  }\n")
            f.write("  def g%d(xs: List[Int]): List[String] = xs.filter(_ > %d).map(x => (x * 2).toString)\n"
                    % (j, j))
        f.write("}\n")
PY
	# The Ruby loop: ARGV[0] seconds; with ARGV[1], a progress line
	# ("done <ms since the epoch> <iterations>") every 50 iterations.
	cat >"$tmp/work/loop.rb" <<'RUBY'
# Strings, hashes, blocks and method dispatch through JRuby's call sites.
class Acc
  def initialize; @h = Hash.new(0); end
  def add(k, v); @h[k] += v; end
  def top; @h.max_by { |_, v| v }; end
end
stop = Time.now + ARGV[0].to_i
progress = ARGV.size > 1
n = 0
it = 0
while Time.now < stop
  a = Acc.new
  (1..2000).each { |i| a.add("k#{i % 97}", i * 3) }
  s = (1..200).map { |i| i.to_s(16) }.join(",").split(",").map(&:reverse).sort.first
  n += a.top[1] + s.size
  it += 1
  if progress && it % 50 == 0
    puts "done #{(Time.now.to_f * 1000).to_i} 50"
    $stdout.flush
  end
end
puts n
RUBY
	chmod -R a+rX "$tmp/work"
	mkdir -p "$tmp/work/classes" && chown nobody "$tmp/work/classes"
}

# Run "${@:3}" every 0.1 s, at most $1 times, until it succeeds (0) or the
# process $2 is gone (1).
jw_wait_until() {
	local tries=$1 pid=$2
	shift 2
	for _ in $(seq "$tries"); do
		"$@" && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# Start jprofd on $tmp/jprofd.sock from copies of the build (a rebuild during
# the run does not change what is measured); sets daemon_pid.
jw_daemon() {
	cp "$build/jprofd" "$build/jprofctl" "$build/agent/libjprofagent.so" "$tmp/"
	"$tmp/jprofd" --socket "$tmp/jprofd.sock" --agent "$tmp/libjprofagent.so" --rate 19 \
		2>"$tmp/jprofd.log" &
	daemon_pid=$!
	# Loading the BPF programs takes seconds on a loaded machine.
	jw_wait_until 600 "$daemon_pid" test -S "$tmp/jprofd.sock" && return 0
	echo "$me: jprofd did not start:" >&2
	tail -n 5 "$tmp/jprofd.log" >&2
	exit 1
}

# The pid of the JVM among $1 and its descendants (launcher scripts fork or
# exec java), or nothing.
jvm_of() {
	local p kids
	for p in "$1" $(pgrep -P "$1" 2>/dev/null || true); do
		if grep -q libjvm.so "/proc/$p/maps" 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	for p in $(pgrep -P "$1" 2>/dev/null || true); do
		kids=$(jvm_of "$p")
		if [ -n "$kids" ]; then
			echo "$kids"
			return
		fi
	done
	return 0
}

# Wait up to 10 s for the JVM under $1; prints its pid or nothing.
jw_wait_jvm() {
	local pid=""
	for _ in $(seq 500); do
		pid=$(jvm_of "$1")
		[ -n "$pid" ] && break
		kill -0 "$1" 2>/dev/null || break
		sleep 0.02
	done
	echo "$pid"
}

# Record pid $2 as user $1 with jprofctl's record options "${@:3}", its
# events (JSON lines) in the file $jw_events, under `timeout $jw_timeout` (0:
# none). A JVM still starting up (no JVMTI yet) is jprofd's to wait for:
# its attach tries again until the JVM is 15 s old (docs/attach.md).
jw_timeout=0
jw_record() {
	local user=$1 pid=$2 rc=0
	shift 2
	timeout "$jw_timeout" setpriv --reuid="$user" --regid="$(id -gn "$user")" --clear-groups -- \
		"$tmp/jprofctl" --socket "$tmp/jprofd.sock" record --pid "$pid" "$@" \
		2>"$jw_events" || rc=$?
	return "$rc"
}

# argv of one run of PROGRAM (javac, scalac, jruby) into the array jw_argv;
# jruby runs for $2 seconds.
jw_argv_of() {
	case $1 in
	javac) jw_argv=("$jhome/bin/javac" -J-Xmx1g -nowarn --patch-module "java.base=$tmp/work/java.base"
		       -d "$tmp/work/classes" "@$tmp/work/javac.files") ;;
	scalac) jw_argv=(scalac -J-Xmx1g -d "$tmp/work/classes" "$tmp/work/scala"/*.scala) ;;
	jruby) jw_argv=(jruby "$tmp/work/loop.rb" "$2") ;;
	*) echo "$me: unknown program $1" >&2; exit 2 ;;
	esac
}

# A prefix of the workload's command (java_stress.sh: nice -n 5).
jw_nice=()

# Run "$@" as nobody with the JDK of $jhome in the background; sets job_pid.
jw_spawn() {
	local out=$1
	shift
	setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
		env JAVA_HOME="$jhome" PATH="$jhome/bin:$PATH" "${agent_env[@]}" "${jw_nice[@]}" "$@" \
		>"$out" 2>&1 &
	job_pid=$!
}

tomcat_port=${BENCH_TOMCAT_PORT:-18080}
tomcat_url="http://127.0.0.1:$tomcat_port/bench.jsp"

# Debian's tomcat10 on its own base ($tmp/tomcat: a copy of /etc/tomcat10 on
# port $tomcat_port, no shutdown port) with the default ROOT app and a JSP
# that sorts, formats and hashes (so requests run Java code beyond the
# connector's) and makes no session (wrk keeps no cookie: a session per
# request filled the 512 MB heap in 8 minutes, GC took over), run by catalina.sh as the tomcat user with cwd $tmp/tomcat.
# Sets job_pid (the launcher) and tomcat_pid (the JVM); waits until the JSP
# answers.
tomcat_start() {
	local base=$tmp/tomcat out=$1
	if [ ! -d "$base" ]; then
		mkdir -p "$base"/{conf,logs,temp,work,webapps}
		cp -r /etc/tomcat10/. "$base/conf/"
		sed -i -e "s/port=\"8080\"/port=\"$tomcat_port\"/" \
			-e 's/<Server port="8005"/<Server port="-1"/' "$base/conf/server.xml"
		cp -r /var/lib/tomcat10/webapps/ROOT "$base/webapps/"
		cat >"$base/webapps/ROOT/bench.jsp" <<'JSP'
<%@ page import="java.util.*" contentType="text/plain" session="false" %><%
    // Per request: a sorted map of formatted keys, a stream over it, a hash.
    String q = request.getParameter("n");
    int n = q == null ? 300 : Integer.parseInt(q);
    TreeMap<String, Integer> m = new TreeMap<>();
    for (int i = 0; i < n; i++)
        m.merge(String.format("k%05x", (i * 2654435761L) & 0xfffff), i, Integer::sum);
    long h = m.entrySet().stream().filter(e -> e.getValue() % 3 != 0)
        .mapToLong(e -> e.getKey().hashCode() * 31L + e.getValue()).sum();
%><%= m.size() %> <%= h %>
JSP
		chown -R tomcat:tomcat "$base"
		chmod 755 "$base"
	fi
	(cd "$base" && setpriv --reuid=tomcat --regid=tomcat --clear-groups -- \
		env JAVA_HOME="$jhome" CATALINA_HOME=/usr/share/tomcat10 CATALINA_BASE="$base" \
		CATALINA_TMPDIR="$base/temp" JAVA_OPTS="-Djava.awt.headless=true -Xmx512m" \
		"${agent_env[@]}" "${jw_nice[@]}" /usr/share/tomcat10/bin/catalina.sh run >"$out" 2>&1) &
	job_pid=$!
	tomcat_pid=$(jw_wait_jvm "$job_pid")
	jw_wait_until 300 "$job_pid" curl -sf -o /dev/null "$tomcat_url" && return 0
	echo "$me: tomcat did not answer on $tomcat_url" >&2
	tail -n 20 "$out" >&2
	exit 1
}

# Stop tomcat (SIGTERM, then SIGKILL after 20 s); its exit status is the
# launcher's.
tomcat_stop() {
	[ -n "${tomcat_pid:-}" ] && kill -TERM "$tomcat_pid" 2>/dev/null
	for _ in $(seq 200); do
		kill -0 "$job_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$tomcat_pid" 2>/dev/null || true
	wait "$job_pid" 2>/dev/null || true
	job_pid=""
	tomcat_pid=""
}

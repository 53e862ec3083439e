# bash completion for jprofctl(1)

_jprofctl()
{
	local cur prev cmd i
	COMPREPLY=()
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD-1]}

	# The command is the first word that is not an option or its argument.
	cmd=
	for ((i = 1; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		--socket) ((i++)) ;;
		-*) ;;
		*) cmd=${COMP_WORDS[i]}; break ;;
		esac
	done

	case $prev in
	--socket|-o|--output)
		compopt -o filenames 2>/dev/null
		COMPREPLY=($(compgen -f -- "$cur"))
		return
		;;
	-p|--pid)
		COMPREPLY=($(compgen -W "$(ps -o pid= -u "$(id -u)" 2>/dev/null)" -- "$cur"))
		return
		;;
	-f|--format)
		# The names come from the jprofctl being completed: its format table.
		COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" formats --names 2>/dev/null)" -- "$cur"))
		return
		;;
	-e|--event)
		# One event or a comma-separated list: complete the name after the last comma.
		local pre=""
		[[ $cur == *,* ]] && pre="${cur%,*},"
		COMPREPLY=($(compgen -P "$pre" -W "cpu offcpu wall alloc lock" -- "${cur##*,}"))
		return
		;;
	-d|--duration|-i|--interval|--threshold|--alloc|--lock|-l|--last|--from|--to|-c|--comm|-u|--unit|-g|--cgroup)
		return
		;;
	--group-by)
		COMPREPLY=($(compgen -W "none comm pid thread unit cgroup" -- "$cur"))
		return
		;;
	esac

	case $cmd in
	"")
		COMPREPLY=($(compgen -W "status record profile formats --socket --help --version" -- "$cur"))
		;;
	status)
		COMPREPLY=($(compgen -W "--json --socket --help" -- "$cur"))
		;;
	record)
		COMPREPLY=($(compgen -W "--pid --all --duration --event --interval --threshold --alloc --lock --output --format
			--threads --java --java-lines --java-signatures --java-types --no-progress --json-events
			--socket --help" -- "$cur"))
		;;
	formats)
		COMPREPLY=($(compgen -W "--names --help" -- "$cur"))
		;;
	profile)
		COMPREPLY=($(compgen -W "--last --from --to --pid --comm --unit --cgroup --group-by
			--output --format --json-events --socket --help" -- "$cur"))
		;;
	esac
}
complete -F _jprofctl jprofctl

# valid_email TEXT: succeeds when TEXT looks like an e-mail address.
valid_email() { case "$1" in *@*.*) return 0 ;; *) return 1 ;; esac; }

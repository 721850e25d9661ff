# add A B: A + B.
add() { echo $(( $1 + $2 )); }
# mul A B: A * B.
mul() { echo $(( $1 * $2 )); }

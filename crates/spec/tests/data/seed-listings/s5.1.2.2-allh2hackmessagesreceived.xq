
let $x := //Node[last()]/Children/LogicalAddress,

let $y := //Event[@name="h2hackmessage"]/Message/SourceAddress return

for $i in $x return

if ($i = $y) then <out&gt;true&lt;/out&gt; else &lt;out&gt;false&lt;/out&gt;

